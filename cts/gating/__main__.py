"""``python -m cts.gating <sweep dir> gate=NAME``."""

from cts.core.errors import run_cli
from cts.gating.cli import main

run_cli(main)
