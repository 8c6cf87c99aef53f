"""Import ahead what a sweep report needs, so that building it at the end of a sweep pays no import.

At the end of a multirun the report is on the sweep's critical path: its first plot imports
matplotlib, its first LaTeX table pandas' Styler and its jinja2 templates, its first interval
scipy.stats (about half a second together). :func:`warm_up` does those imports (and the
lookups each does once per process) earlier, for example in a background thread while the
sweep's requests are in flight.
"""

from __future__ import annotations

import importlib
import logging
import time

log = logging.getLogger(__name__)

MODULES: tuple[str, ...] = (
    "cts.report.build",  # and every cts.report module it imports
    "cts.protocol.metrics",  # the diagnostics' interaction metrics (imported on first use)
    "scipy.stats",  # the bootstrap's quantile
    "pandas.io.formats.style",  # LaTeX tables: pandas' Styler, its jinja2 templates compiled at import
    "pandas.io.formats.csvs",  # CSV tables
    "pandas.core.methods.to_dict",  # rows as records (the sweep's metrics)
    "matplotlib.figure",  # plots: the figure and the Agg canvas (no pyplot)
    "matplotlib.backends.backend_agg",
    "hydra.core.override_parser.overrides_parser",  # the jobs' stored overrides
)
"""What a report imports on first use, in the order it would."""


def warm_up() -> float:
    """Import every module a sweep report uses and do the lookups it does once per process.

    The report never needs this (it imports what it uses when it first uses it); calling it
    earlier only moves that time off the end of the sweep. Safe from a background thread while
    other work runs (nothing is drawn or written; imports take Python's per-module import
    locks), and safe to call twice (the second call returns at once). It also reads the offline
    corpus the report's rule gate lists titles from, when the corpus package is installed.

    Returns:
        Seconds spent.
    """
    start = time.perf_counter()
    for name in MODULES:
        importlib.import_module(name)
    from matplotlib import font_manager
    from PIL import Image

    Image.preinit()  # the image plugins a first savefig loads
    font_manager.findfont(font_manager.FontProperties())  # the default font's lookup, cached process-wide
    try:
        from cts.corpus.wiki import load_corpus

        load_corpus("en-us")  # cached per process: the rules gate's titles (cts.report.beyond.default_gates)
    except Exception as e:  # noqa: BLE001 - the report skips the rules gate without the corpus; so does this
        log.debug("warm-up: no corpus (%s)", e)
    return time.perf_counter() - start
