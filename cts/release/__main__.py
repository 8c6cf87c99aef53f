"""``python -m cts.release``."""

import sys

from cts.release.cli import main

sys.exit(main())
