"""Offload: blocking calls off the event loop, their results and errors back on the caller's loop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cts._util.offload import Offload

REPO = Path(__file__).resolve().parents[2]


def test_each_call_returns_its_own_result_or_error_on_the_caller_s_loop() -> None:
    offload = Offload(workers=3, name="t-offload")
    loop_thread: list[str] = []

    def work(i: int) -> tuple[int, str]:
        time.sleep(0.001 * (i % 5))  # finish out of order
        if i % 7 == 3:
            raise KeyError(i)
        return i * i, threading.current_thread().name

    async def main() -> list[object]:
        loop_thread.append(threading.current_thread().name)
        return await asyncio.gather(*(offload(work, i) for i in range(200)), return_exceptions=True)

    results = asyncio.run(main())
    for i, got in enumerate(results):
        if i % 7 == 3:
            assert isinstance(got, KeyError) and got.args == (i,)
        else:
            assert isinstance(got, tuple) and got[0] == i * i and got[1].startswith("t-offload_")
    names = {r[1] for r in results if isinstance(r, tuple)}
    assert 1 <= len(names) <= 3 and loop_thread[0] not in names  # never on the loop's thread, at most 3 threads


def test_workers_end_when_idle_and_start_again_for_the_next_call() -> None:
    offload = Offload(workers=2, idle_s=0.1)

    async def one() -> int:
        return int(await asyncio.wait_for(offload(lambda: 5), 30))

    assert asyncio.run(one()) == 5 and offload.threads <= 1  # one call, one worker (maybe already gone)
    deadline = time.monotonic() + 5
    while offload.threads and time.monotonic() < deadline:
        time.sleep(0.02)
    assert offload.threads == 0
    assert asyncio.run(one()) == 5  # a fresh loop: a worker starts for it


def test_calls_from_two_loops_at_once_settle_each_on_its_own() -> None:
    offload = Offload(workers=1, batch=64)  # one worker takes both loops' calls in its batches
    seen: dict[int, list[int]] = {}

    async def main(tag: int) -> None:
        seen[tag] = list(await asyncio.gather(*(offload(lambda i=i: tag * 1000 + i) for i in range(100))))

    threads = [threading.Thread(target=lambda t=t: asyncio.run(main(t))) for t in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == {t: [t * 1000 + i for i in range(100)] for t in (1, 2)}


def test_a_cancelled_caller_does_not_stop_the_worker() -> None:
    offload = Offload(workers=1)
    gate = threading.Event()

    async def main() -> int:
        slow = asyncio.ensure_future(offload(gate.wait, 5))
        await asyncio.sleep(0.05)
        slow.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await slow
        return int(await offload(lambda: 7))

    assert asyncio.run(main()) == 7


def test_a_call_queued_as_the_last_worker_times_out_still_runs() -> None:
    offload = Offload(workers=1, idle_s=0.01)

    async def main() -> list[int]:
        out = []
        for i in range(50):  # calls spaced around the idle timeout: each finds a worker ending or gone
            out.append(int(await offload(lambda i=i: i)))
            await asyncio.sleep(0.005 + 0.01 * (i % 3))
        return out

    assert asyncio.run(asyncio.wait_for(main(), 30)) == list(range(50))


EXITS_AT_ONCE = """
import asyncio, sys, time
from cts._util.offload import Offload

offload = Offload()

def slow(path):
    time.sleep(0.5)
    open(path, "w").write("stored")

async def main():
    offload(slow, sys.argv[1])  # not awaited: the process ends at once, as after a SIGTERM

asyncio.run(main())
"""


def test_the_process_waits_at_exit_for_the_calls_it_queued(tmp_path: Path) -> None:
    out = tmp_path / "row"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", EXITS_AT_ONCE, str(out)], env=env, timeout=60, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "stored"  # daemon workers alone would have been stopped mid-call


def test_drain_says_whether_the_calls_finished_in_time() -> None:
    offload = Offload(workers=1)
    gate = threading.Event()

    async def main() -> None:
        offload(gate.wait, 5)
        assert not offload.drain(0.05)  # still running
        gate.set()
        assert offload.drain(5)

    asyncio.run(main())
