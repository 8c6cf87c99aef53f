"""``python -m cts.plan``: see :mod:`cts.plan.cli`."""

from cts.core.errors import run_cli
from cts.plan.cli import main

run_cli(main)
