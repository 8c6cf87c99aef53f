"""``python -m cts.report``."""

from cts.core.errors import run_cli
from cts.report.cli import main

run_cli(main)
