"""``python -m cts.agreement <sweep dir> --labels <file>``."""

import sys

from cts.agreement.cli import main

sys.exit(main())
