"""Process start-up: the cyclic GC is off while cts starts (``run.py``), then frozen and on again.

Start-up (imports, composing every job's config, building the jobs' roles and MLflow runs)
builds about a million long-lived objects. With the cyclic GC on, each full collection
rescans them all: about 1 s of a sweep's start and 0.1-0.3 s per collection later, with the
GIL held, so a sweep's event loop stalls meanwhile. Frozen (:func:`gc.freeze`), they are
never rescanned.
"""

from __future__ import annotations

import gc


def end_startup_gc() -> None:
    """Freeze what start-up built and turn the cyclic GC back on, if ``run.py`` turned it off.

    Later collections (and the one at exit) only walk what is allocated afterwards. A
    single job calls it as it starts; a sweep session once every job is set up
    (:class:`cts.sweep.SweepSession`). Elsewhere (a notebook, a test) the GC is on and
    this does nothing.
    """
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
