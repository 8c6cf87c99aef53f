"""Where a sweep's time goes: each thread's CPU seconds over time, sampled while the sweep runs.

A multirun on the cts launcher is one process: its event loop thread (``cts-sweep-loop``) runs
every instance, one thread per job (``cts-job-<i>``) sets the job up and ends it, taking turns,
and background threads (MLflow's trace writer, the HTTP pool) do the rest. They share one core
at most (the GIL). :class:`ThreadClock` samples each thread's CPU time (``psutil``) a few times a
second, with the machine's busy CPU and the sweep's requests in flight, so the planner can tell
the work per run (the loop's) from the work per job (the job threads') and the writer's, see when
each job's set-up and end ran, and how much of a core the sweep could have had: what a slice of
five instances measures and a sweep of a hundred must scale differently (:mod:`cts.plan.schedule`).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cts._util.launch import Launch
    from cts.sweep import SweepSession

__all__ = ["ThreadClock", "ThreadSpan", "Timeline", "timeline_from_json"]


@dataclass(frozen=True)
class ThreadSpan:
    """One thread's CPU over the sweep.

    Attributes:
        name: The thread's name (``cts-job-3``, ``cts-sweep-loop``, ...).
        cpu_s: Its CPU seconds while sampled.
        busy: ``(start, end, cpu_s)`` of each stretch in which it used CPU, seconds from the start.
    """

    name: str
    cpu_s: float
    busy: tuple[tuple[float, float, float], ...] = ()


@dataclass(frozen=True)
class Timeline:
    """What :class:`ThreadClock` saw.

    Attributes:
        wall_s: Seconds from start to stop.
        cpu_s: This process's CPU seconds in that time.
        threads: Each thread's CPU.
        epoch: ``time.time()`` at the start (to place records' and traces' times on the timeline).
        samples: ``(t, process CPU s, machine busy CPU s, requests in flight, congestion signals so far,
            the summed limit of the endpoints that saw one)`` every few tenths of a second (-1: no answer).
        cores: CPUs of the machine.
        gc_s: Seconds spent in the cyclic garbage collector (every generation).
        load: The machine's 5-minute load average at the end (runnable threads, this process's included).
        peak_in_flight: The most requests the endpoints held at once, summed over endpoints (their
            limiters' high-water marks, which samples a few tenths of a second apart can miss;
            0: not known, e.g. a timeline of an older version).
        turns: ``(thread name, start, end, CPU s)`` of each time a job thread held the sweep's turn
            (:attr:`cts.sweep.SweepSession.holds`, seconds from the start): a job's set-up and end,
            timed exactly (empty in older timelines: their samples' stretches stand in).
    """

    wall_s: float
    cpu_s: float
    threads: tuple[ThreadSpan, ...] = ()
    epoch: float = 0.0
    samples: tuple[tuple[float, float, float, int, int, float], ...] = ()
    cores: int = 1
    gc_s: float = 0.0
    load: float = 0.0
    peak_in_flight: int = 0
    turns: tuple[tuple[str, float, float, float], ...] = ()

    def cpu_of(self, *prefixes: str) -> float:
        """CPU seconds of the threads whose name starts with one of ``prefixes``."""
        return sum(t.cpu_s for t in self.threads if t.name.startswith(prefixes))

    def to_json(self) -> dict[str, Any]:
        """As ``sweep_actual.json`` stores it."""
        return {
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "epoch": self.epoch,
            "cores": self.cores,
            "gc_s": self.gc_s,
            "load": self.load,
            "peak_in_flight": self.peak_in_flight,
            "turns": [list(t) for t in self.turns],
            "threads": [{"name": t.name, "cpu_s": t.cpu_s, "busy": [list(b) for b in t.busy]} for t in self.threads],
            "samples": [list(s) for s in self.samples],
        }


def timeline_from_json(data: Mapping[str, Any] | None) -> Timeline | None:
    """The :class:`Timeline` of :meth:`Timeline.to_json` (None when there is none)."""
    if not data:
        return None
    threads = tuple(
        ThreadSpan(str(t["name"]), float(t["cpu_s"]), tuple((float(a), float(b), float(c)) for a, b, c in t["busy"]))
        for t in data.get("threads", ())
    )
    samples = tuple(_sample_of(row) for row in data.get("samples", ()))
    return Timeline(
        float(data["wall_s"]),
        float(data["cpu_s"]),
        threads,
        float(data.get("epoch", 0.0)),
        samples,
        int(data.get("cores", 1)),
        float(data.get("gc_s", 0.0)),
        float(data.get("load", 0.0)),
        int(data.get("peak_in_flight", 0)),
        tuple((str(n), float(a), float(b), float(c)) for n, a, b, c in data.get("turns", ())),
    )


def _sample_of(row: Sequence[float]) -> tuple[float, float, float, int, int, float]:
    t, cpu, busy, flight, *limits = row
    congestion, limit = (limits + [-1, -1.0])[:2]
    return (float(t), float(cpu), float(busy), int(flight), int(congestion), float(limit))


@dataclass
class _Track:
    name: str
    last: float
    busy: list[list[float]] = field(default_factory=list)
    idle_seen: float | None = None  # the latest sample that found it idle since its last stretch


class ThreadClock:
    """Sample each thread's CPU time every ``interval_s`` seconds from :meth:`start` to :meth:`stop`.

    A stretch of a thread's activity ends when samples find it idle for ``gap_s`` seconds. Only
    samples can say it was idle: when the clock itself was starved of the GIL or the core for a
    while, a thread whose CPU grew across that hole stays in one stretch.

    Args:
        launch: The sweep's launch, whose session's loop each sample reads (calls in flight, congestion).
    """

    def __init__(self, launch: Launch | None = None, interval_s: float = 0.2, gap_s: float = 1.0) -> None:
        self.interval_s, self.gap_s = interval_s, gap_s
        self._launch = launch
        self._tracks: dict[int, _Track] = {}
        self._samples: list[tuple[float, float, float, int, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cts-plan-clock", daemon=True)
        self._t0 = self._cpu0 = self._epoch = self._busy0 = 0.0
        self._gc_s, self._gc_started = 0.0, 0.0
        self._peak = 0
        self._holds: list[tuple[str, float, float, float]] | None = None  # the session's, once seen

    def start(self) -> ThreadClock:
        """Start sampling now (the sweep's time 0)."""
        self._t0, self._cpu0, self._epoch = time.monotonic(), time.process_time(), time.time()
        self._busy0 = _machine_busy()
        self._sample(first=True)
        gc.callbacks.append(self._on_gc)
        self._thread.start()
        return self

    def stop(self) -> Timeline:
        """Stop sampling; the timeline since :meth:`start`."""
        import os

        self._stop.set()
        self._thread.join()
        self._sample()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        threads = tuple(
            ThreadSpan(t.name, sum(b[2] for b in t.busy), tuple((b[0], b[1], b[2]) for b in t.busy))
            for t in self._tracks.values()
            if t.busy and t.name != "cts-plan-clock"
        )
        wall, cpu = time.monotonic() - self._t0, time.process_time() - self._cpu0
        load = os.getloadavg()[1] if hasattr(os, "getloadavg") else 0.0
        samples = tuple(self._samples)
        turns = tuple((name, a - self._t0, b - self._t0, c) for name, a, b, c in list(self._holds or ()))
        return Timeline(
            wall, cpu, threads, self._epoch, samples, os.cpu_count() or 1, self._gc_s, load, self._peak, turns
        )

    def _on_gc(self, phase: str, info: Mapping[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started:
            self._gc_s += time.perf_counter() - self._gc_started

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self, first: bool = False) -> None:
        import psutil

        now = time.monotonic() - self._t0
        names = {t.native_id: t.name for t in threading.enumerate()}
        try:
            cpu = {t.id: t.user_time + t.system_time for t in psutil.Process().threads()}
        except psutil.Error:  # the process is exiting
            return
        for tid, used in cpu.items():
            track = self._tracks.get(tid)
            name = names.get(tid, "other")
            if track is None or track.name != name:  # a new thread (or a reused id)
                # A thread alive at the start counts from there; a later one from its own start.
                track = self._tracks[tid] = _Track(name, used if first else 0.0)
            self._advance(track, now, used)
        busy = _machine_busy() - self._busy0
        session = self._launch.session if self._launch is not None else None
        if session is not None and self._holds is None:
            self._holds = session.holds  # the list itself: it outlives the session, which closes before stop()
        flight, congestion, limit, peak = _on_loop(session)
        self._peak = max(self._peak, peak)
        self._samples.append((now, time.process_time() - self._cpu0, busy, flight, congestion, limit))

    def _advance(self, track: _Track, now: float, used: float) -> None:
        delta = used - track.last
        track.last = used
        if delta <= 0:
            track.idle_seen = now
            return
        idle_for = 0.0 if track.idle_seen is None or not track.busy else track.idle_seen - track.busy[-1][1]
        track.idle_seen = None
        if track.busy and idle_for < self.gap_s:
            track.busy[-1][1] = now
            track.busy[-1][2] += delta
        else:
            track.busy.append([max(0.0, now - self.interval_s), now, delta])


def _machine_busy() -> float:
    """CPU seconds the whole machine has been busy (every process, every core)."""
    import psutil

    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def _on_loop(session: SweepSession | None) -> tuple[int, int, float, int]:
    """The sweep loop's requests in flight, congestion signals so far, the summed limit of the endpoints that saw one,
    and the sum of the endpoints' peaks of requests in flight so far.

    ``(-1, -1, -1.0, 0)`` outside a sweep's session, or when its loop does not answer within a tenth of a second.
    """
    import asyncio

    if session is None or not session.loop.is_running():
        return (-1, -1, -1.0, 0)

    async def read() -> tuple[int, int, float, int]:
        from cts.llm import calls_in_flight, limiter_snapshots

        limiters = limiter_snapshots()
        congested = [s for s in limiters if s.congestion]
        peak = sum(s.peak_in_flight for s in limiters)
        return calls_in_flight().calls, sum(s.congestion for s in limiters), sum(s.limit for s in congested), peak

    try:
        return asyncio.run_coroutine_threadsafe(read(), session.loop).result(timeout=0.1)
    except Exception:  # noqa: BLE001 - a busy or closing loop: this sample has no count
        return (-1, -1, -1.0, 0)
