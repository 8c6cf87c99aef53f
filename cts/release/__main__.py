"""``python -m cts.release``."""

from cts.core.errors import run_cli
from cts.release.cli import main

run_cli(main)
