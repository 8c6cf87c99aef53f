"""Import, in a background thread, what a sweep will need at its end, while its requests are in flight.

The jobs' ends (their summaries' bootstrap intervals) and the sweep report import scipy.stats,
matplotlib and pandas' Styler after the last reply, where the sweep waits for nothing else: about
a second on the sweep's critical path. :class:`cts.sweep.SweepSession` runs :func:`warm_up` once
every job is set up, when the event loop waits on the endpoints most of the time. (Earlier, at the
probes, it competes with composing the jobs and starting them: measured slower.)
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Sequence

log = logging.getLogger(__name__)


def warm_up(steps: Sequence[str]) -> threading.Thread:
    """Run ``steps`` in a daemon thread, in order, and return the (started) thread.

    A step is a module to import (``scipy.stats``), or ``module:function`` to import and call
    with no argument (``cts.report.warm:warm_up``). A step that fails is logged at debug level
    and skipped: whoever needs it imports it again and meets the error where it matters.
    """
    thread = threading.Thread(target=_run_all, args=(tuple(steps),), name="cts-warm-up", daemon=True)
    thread.start()
    return thread


def _run_all(steps: Sequence[str]) -> None:
    for step in steps:
        module, _, function = step.partition(":")
        try:
            imported = importlib.import_module(module)
            if function:
                getattr(imported, function)()
        except Exception as e:  # noqa: BLE001 - a warm-up never fails the launch
            log.debug("warm-up: %s skipped (%s)", step, e)
