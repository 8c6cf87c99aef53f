"""``python -m cts.plan``: see :mod:`cts.plan.cli`."""

import sys

from cts.plan.cli import main

sys.exit(main())
