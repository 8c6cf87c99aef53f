"""``python -m cts.realism <dataset> [overrides]``."""

from cts.core.errors import run_cli
from cts.realism.cli import main

run_cli(main)
