"""CPU per blocking call run off the event loop: ``asyncio.to_thread`` against :class:`cts._util.offload.Offload`.

Each call is a primary-key look-up in a SQLite table (what the response cache's store does), made
by 64 tasks at once: ``burst`` awaits the calls back to back, ``spaced`` sleeps 20-38 ms between a
task's calls (calls come one at a time, as in a sweep), and the CPU of the same sleeps without calls
is taken out. Prints the process CPU per call::

    python benchmarks/offload_bench.py [--tasks 64] [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cts._util.offload import Offload  # noqa: E402

Runner = Callable[..., Awaitable[Any]]


def _lookup(db: Path) -> Callable[[str], Any]:
    local = threading.local()

    def get(key: str) -> Any:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = sqlite3.connect(db, check_same_thread=False)
        return conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()

    return get


async def _tasks(run: Runner | None, get: Callable[[str], Any], tasks: int, calls: int, spaced: bool) -> None:
    async def task(i: int) -> None:
        for c in range(calls):
            if run is not None:
                await run(get, f"k{i}-{c}")
            if spaced:
                await asyncio.sleep(0.02 + (i % 7) * 0.003)

    await asyncio.gather(*(task(i) for i in range(tasks)))


def _cpu(run: Callable[[], Runner | None], get: Callable[[str], Any], tasks: int, calls: int, spaced: bool) -> float:
    start = time.process_time()
    asyncio.run(_tasks(run(), get, tasks, calls, spaced))
    return time.process_time() - start


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--calls", type=int, default=200, help="calls per task (spaced: a quarter of them)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "kv.sqlite"
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT)")
        get = _lookup(db)
        runners: dict[str, Callable[[], Runner | None]] = {"to_thread": lambda: asyncio.to_thread, "Offload": Offload}
        for spaced in (False, True):
            calls = args.calls // 4 if spaced else args.calls
            n = args.tasks * calls
            idle = _cpu(lambda: None, get, args.tasks, calls, spaced) if spaced else 0.0
            for name, runner in runners.items():
                cpu = _cpu(runner, get, args.tasks, calls, spaced) - idle
                print(
                    f"{'spaced' if spaced else 'burst':6} {name:9} {1e6 * cpu / n:6.1f} us of CPU per call ({n} calls)"
                )


if __name__ == "__main__":
    main()
