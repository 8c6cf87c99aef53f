"""``python -m cts.report``."""

import sys

from cts.report.cli import main

sys.exit(main())
