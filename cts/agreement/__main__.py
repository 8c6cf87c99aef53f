"""``python -m cts.agreement <sweep dir> --labels <file>``."""

from cts.agreement.cli import main
from cts.core.errors import run_cli

run_cli(main)
