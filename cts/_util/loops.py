"""The event loops the jobs run on: uvloop's where it is installed, else asyncio's own.

A sweep's requests, their caches and the protocol's steps all run on one loop in one
process; with uvloop (libuv, in Cython) the loop's own share of that work (selecting,
scheduling callbacks, socket reads) costs less CPU: the paper grid at N=100 took 27.3 s
of CPU instead of 29.4 s (``benchmarks/sweep_bench.py --shape paper --n 100``, run with and
without ``CTS_EVENT_LOOP=asyncio``). ``CTS_EVENT_LOOP=asyncio`` keeps
asyncio's loop (e.g. to rule uvloop out when chasing a bug).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

LOOP_ENV = "CTS_EVENT_LOOP"
"""``asyncio`` picks asyncio's own loop; anything else (or unset) uvloop's when it is installed."""


def loop_kind() -> str:
    """``uvloop`` or ``asyncio``: the loop :func:`new_event_loop` makes here."""
    if os.environ.get(LOOP_ENV, "").strip().lower() == "asyncio" or sys.platform == "win32":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop of :func:`loop_kind`'s kind."""
    if loop_kind() == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on a loop from :func:`new_event_loop`."""
    if sys.version_info < (3, 11):  # noqa: UP036 - requires-python admits 3.10, which has no asyncio.Runner
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """:func:`run`, also from code already inside an event loop (Jupyter): then on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run, coro).result()
