"""``python -m cts.gating <sweep dir> gate=NAME``."""

import sys

from cts.gating.evaluate import main

sys.exit(main())
