"""``python -m cts.gating <sweep dir> gate=NAME``."""

import sys

from cts.gating.cli import main

sys.exit(main())
