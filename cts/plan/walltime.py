"""The wall-time forecast: the schedule's parameters measured on the slice, the main run simulated.

The calibration slice is the same sweep on a few instances (:mod:`cts.plan.calibrate`); its
process records a :class:`~cts.plan.clock.Timeline` (each thread's CPU, the machine's load, the
requests in flight) in ``sweep_actual.json``. From it and the slice's records, :func:`measure`
reads what :mod:`cts.plan.schedule` needs, each from the slice itself:

- the event loop's CPU per run and the trace writer's, the CPU of each job's set-up and end
  (the two turns its thread held, timed by the session; in older timelines its thread's first and
  last stretches of work), and the fixed wait of a turn beyond its CPU (the lower quartile of the
  turns' wall less CPU; in older timelines of the spacing of consecutive turns);
- the latency of a request (a low quantile of the calls that did not wait), a run's critical
  path in round trips (its fastest run), the endpoint's capacity (the limit the slice's congestion
  settled at or a plateau of its requests in flight: a server's own rate limit; else unknown
  between the peak the slice showed it takes, the high end's, and the configured ceiling, the low
  end's, the expected value being the geometric midpoint of their wall times), and how much of a
  core the process got (its CPU rate plus the machine's idle cores; its 10%, 50% and 90% quantiles
  over the slice).

:func:`forecast_wall` then simulates the main run (its runs, requests and cached runs) at those
quantiles (and the requests' interval), adds the report's time (timed on a replica of the slice at the sweep's size,
:func:`cts.plan.report_time.time_report`) and widens the interval by the seconds the model missed
the slice's own wall time by (what it does not model, a retry's backoff, is a few seconds, not a share).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from cts.plan.clock import Timeline, timeline_from_json
from cts.plan.forecast import Interval, JobSlice, latency_of
from cts.plan.schedule import JobShape, Machine, simulate

__all__ = ["Measured", "capacity_unknown", "forecast_wall", "loaded_wall", "measure"]

LOOP_THREADS = ("cts-sweep-loop", "asyncio_", "cts-cache", "other")
"""The threads of the event loop's work (``asyncio.to_thread`` workers, the caches' store threads, native threads)."""
IGNORED_THREADS = ("MainThread", "tqdm", "cts-plan-clock", "cts-job-")
"""Threads the model leaves out."""


@dataclass(frozen=True)
class Measured:
    """What the slice says about the schedule (see the module docstring).

    Attributes:
        machine: The machine at the median core share.
        core: The core share's 10%, 50% and 90% quantiles over the slice.
        setup_cpu_s: Per job (in the sweep's order), its set-up's CPU.
        end_cpu_s: Per job, its end's CPU.
        steps: Per job, the round trips of its fastest run.
        lead_s: From the slice's start to its first job's set-up (the launcher's own start).
        slice_wall_s: The slice's wall time, and ``slice_model_s`` the model's replay of it.
        capacity_low: The least capacity the slice allows (its peak of requests in flight): the high end's.
        capacity_best: The most it allows (the configured ``ceiling`` when the slice met no limit): the low end's.
        loaded_core: A fair share of a core under the machine's 5-minute load average ``load`` on its
            ``cores`` (0: not known); said beside the interval when it is below the interval's share.
        note: Why the model does not apply (empty when it does).
    """

    machine: Machine
    core: tuple[float, float, float] = (1.0, 1.0, 1.0)
    setup_cpu_s: tuple[float, ...] = ()
    end_cpu_s: tuple[float, ...] = ()
    steps: tuple[int, ...] = ()
    lead_s: float = 0.0
    slice_wall_s: float = 0.0
    slice_model_s: float = 0.0
    capacity_low: int = 0
    capacity_best: int = 0
    ceiling: int = 0
    loaded_core: float = 0.0
    load: float = 0.0
    cores: int = 1
    note: str = ""


def measure(
    source: Path, calibration: Sequence[JobSlice], job_concurrency: int, ceiling: int, initial: int = 0
) -> Measured:
    """The schedule's parameters from the slice in ``source`` (``calibration``: its jobs, in the sweep's order).

    Args:
        source: The calibration slice's sweep dir (or an earlier run of the same sweep).
        calibration: Its jobs as :class:`JobSlice` (their samples are the slice's runs).
        job_concurrency: Runs in flight per job in the main run.
        ceiling: The endpoints' calls in flight as configured (the runtime's limit).
        initial: The adaptive limiter's first limit (0: no slow start).
    """
    timeline = _timeline(source)
    samples = [s for j in calibration for s in j.samples]
    if timeline is None or not samples:
        why = "the slice recorded no timeline" if timeline is None else "the slice recorded no run"
        return Measured(Machine(0.0, 1, 1.0, 0.0, 0.0), note=why)
    jobs = _job_turns(timeline, len(calibration)) if timeline.turns else _job_threads(timeline, len(calibration))
    runs = len(samples)
    latency = latency_of(samples).expected or 1e-3
    setups, ends = zip(*(_split(spans) for spans in jobs), strict=True) if jobs else ((), ())
    core = _core(timeline)
    wait = _held_wait if timeline.turns else _spacing
    machine = Machine(
        latency_s=latency,
        capacity=ceiling,
        core=core[1],
        run_cpu_s=timeline.cpu_of(*LOOP_THREADS) / runs,
        trace_cpu_s=_writer_cpu(timeline) / runs,
        setup_wait_s=wait(setups, core[1]),
        end_wait_s=wait(ends, core[1]),
        job_concurrency=job_concurrency,
        initial=initial,
    )
    machine = replace(machine, flush=machine.end_wait_s >= 0.3)
    measured = Measured(
        machine,
        core,
        tuple(sum(s[2] for s in spans) for spans in setups),
        tuple(sum(s[2] for s in spans) for spans in ends),
        tuple(max(1, round(min(s.elapsed_s for s in j.samples) / latency)) if j.samples else 1 for j in calibration),
        lead_s=min((s[0][0] for s in setups if s), default=0.0),
        slice_wall_s=timeline.wall_s,
        loaded_core=_loaded_share(timeline),
        load=timeline.load,
        cores=timeline.cores,
    )
    return _fit_capacity(measured, calibration, timeline)


def forecast_wall(
    measured: Measured, jobs: Sequence[JobSlice], calls: Sequence[float], sweep_calls: Interval, report_s: float
) -> Interval:
    """The main run's wall time: its schedule simulated at the core share's quantiles, plus the report.

    Args:
        measured: From :func:`measure`.
        jobs: The main run's jobs (``n_total`` runs, ``remaining`` of them paid).
        calls: Per job, its expected requests.
        sweep_calls: The sweep's requests: the ends of its interval scale every job's (the jobs'
            own intervals are wider than the sweep's, whose per-instance totals share work).
        report_s: The sweep report's time (0 without one).
    """
    ends = []
    capacity = measured.machine.capacity
    expected = sweep_calls.expected or 1.0
    for core, pick in zip(measured.core[::-1], ("low", "expected", "high"), strict=True):
        scale = getattr(sweep_calls, pick) / expected
        shapes = _shapes(measured, jobs, [c * scale for c in calls])
        slots = {"low": measured.capacity_best, "high": measured.capacity_low}.get(pick) or capacity
        wall = simulate(shapes, replace(measured.machine, core=core, capacity=slots)).wall_s
        if pick == "expected" and capacity_unknown(measured):
            # Between the peak the slice showed and the ceiling, the slice says nothing: the wall
            # times' geometric midpoint is the estimate whose worst ratio to either is least.
            shown = simulate(shapes, replace(measured.machine, core=core, capacity=measured.capacity_low)).wall_s
            wall = math.sqrt(wall * shown)
        ends.append(measured.lead_s + wall + report_s)
    miss = abs(measured.slice_wall_s - measured.slice_model_s) if measured.slice_model_s else 0.0
    low, mid, high = sorted(ends)
    return Interval(max(0.0, low - miss), mid, high + miss)


def capacity_unknown(measured: Measured) -> bool:
    """Whether the slice met no limit of the endpoint's and had fewer requests in flight than the ceiling."""
    return measured.capacity_best == measured.ceiling and 0 < measured.capacity_low < measured.ceiling


def loaded_wall(measured: Measured, jobs: Sequence[JobSlice], calls: Sequence[float], report_s: float) -> float | None:
    """The main run's wall time if the machine's load average leaves it only :attr:`Measured.loaded_core` (None: no lower)."""
    if not 0 < measured.loaded_core < measured.core[0]:
        return None
    shapes = _shapes(measured, jobs, list(calls))
    machine = replace(measured.machine, core=measured.loaded_core)
    return measured.lead_s + simulate(shapes, machine).wall_s + report_s


def _shapes(measured: Measured, jobs: Sequence[JobSlice], calls: Sequence[float]) -> list[JobShape]:
    return [
        JobShape(
            j.name,
            j.n_total,
            j.remaining,
            c / j.remaining if j.remaining else 0.0,
            measured.steps[i] if i < len(measured.steps) else 1,
            measured.setup_cpu_s[i] if i < len(measured.setup_cpu_s) else 0.0,
            measured.end_cpu_s[i] if i < len(measured.end_cpu_s) else 0.0,
        )
        for i, (j, c) in enumerate(zip(jobs, calls, strict=True))
    ]


def _fit_capacity(measured: Measured, calibration: Sequence[JobSlice], timeline: Timeline) -> Measured:
    """The endpoint's capacity: what the slice met, else what it showed the endpoint takes.

    It met a limit when the adaptive limiter saw congestion (a 429, a timeout, a 5xx: the limit it
    then settled at is the endpoint's, the median over the rest of the slice), or when its requests
    in flight held a plateau (a second or more within 10% of the slice's peak, below the ceiling)
    that the slice's own schedule would have exceeded (its simulated peak at the ceiling is over
    1.25x the plateau). Without either, the slice says nothing against the configured ceiling:
    the low end assumes the ceiling (:attr:`Measured.capacity_best`), the high end only the
    slice's peak of requests in flight (:attr:`Measured.capacity_low`), and the expected value the
    geometric midpoint of the two wall times (:func:`forecast_wall`). The peak is all the slice
    showed the endpoint takes: the limiters' high-water mark (:attr:`Timeline.peak_in_flight`)
    where the timeline has it, as samples 0.2 s apart miss a peak that lasts less than a round trip.
    """
    counts = [s[3] for s in timeline.samples if s[3] >= 0]
    peak = max(counts, default=0)
    ceiling = measured.machine.capacity
    near = [c >= 0.9 * peak for c in counts]
    held = max((len(list(g)) for k, g in itertools.groupby(near) if k), default=0)
    interval = timeline.samples[1][0] - timeline.samples[0][0] if len(timeline.samples) > 1 else 0.2
    congested = [s[5] for s in timeline.samples if s[4] > 0 and s[5] > 0]
    shapes = _shapes(
        measured,
        [replace(j, n_total=len(j.samples), n_free=0) for j in calibration],
        [sum(s.counts.get("calls", 0.0) for s in j.samples) for j in calibration],
    )
    # A plateau is the endpoint's limit only if the slice's own schedule, unbounded by the
    # endpoint, would have put clearly more requests in flight: else its runs were all it had.
    demand = simulate(shapes, replace(measured.machine, capacity=ceiling)).peak_in_flight
    if congested:
        capacity = max(1, min(ceiling, round(float(np.median(congested)))))
    elif 0 < peak < 0.9 * ceiling and held * interval >= 1.0 and demand > 1.25 * peak:
        capacity = peak
    else:
        capacity = ceiling
    machine = replace(measured.machine, capacity=capacity)
    replay = simulate(shapes, machine)
    shown = max(peak, timeline.peak_in_flight)  # the limiters' own peak: samples can miss the top
    low = min(capacity, shown) if shown > 0 else capacity
    return replace(
        measured,
        machine=machine,
        capacity_low=low,
        capacity_best=capacity,
        ceiling=ceiling,
        slice_model_s=measured.lead_s + replay.wall_s,
    )


def _timeline(source: Path) -> Timeline | None:
    try:
        data: Mapping[str, Any] = json.loads((source / "sweep_actual.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return timeline_from_json(data.get("timeline"))


def _job_threads(timeline: Timeline, n: int) -> list[list[tuple[float, float, float]]]:
    """The busy stretches of each job's thread (``cts-job-<i>``), in the sweep's order."""
    return _per_job(((t.name, span) for t in timeline.threads for span in t.busy), n)


def _job_turns(timeline: Timeline, n: int) -> list[list[tuple[float, float, float]]]:
    """The turns each job's thread held (``cts-job-<i>``: its set-up, its end), in the sweep's order."""
    return _per_job(((name, (start, end, cpu)) for name, start, end, cpu in timeline.turns), n)


def _per_job(spans: Iterable[tuple[str, tuple[float, float, float]]], n: int) -> list[list[tuple[float, float, float]]]:
    """``(thread name, span)`` pairs grouped by the job of ``cts-job-<i>`` (the first ``n``), each in time order."""
    jobs: list[list[tuple[float, float, float]]] = [[] for _ in range(n)]
    for name, span in spans:
        i = name.removeprefix("cts-job-")
        if name.startswith("cts-job-") and i.isdigit() and int(i) < n:
            jobs[int(i)].append(span)
    return [sorted(s) for s in jobs]


def _split(spans: Sequence[tuple[float, float, float]]) -> tuple[list[tuple[float, float, float]], ...]:
    """A job thread's stretches split at its longest pause (its runs): the set-up's, then the end's."""
    if len(spans) < 2:
        return list(spans), []
    gaps = [spans[i + 1][0] - spans[i][1] for i in range(len(spans) - 1)]
    cut = int(np.argmax(gaps)) + 1
    return list(spans[:cut]), list(spans[cut:])


def _spacing(phases: Sequence[Sequence[tuple[float, float, float]]], core: float) -> float:
    """The wait of one turn beyond its CPU: the lower quartile of the spacing of consecutive turns."""
    starts = sorted((p[0][0], sum(s[2] for s in p)) for p in phases if p)
    return _lower_quartile([b[0] - a[0] - a[1] / core for a, b in zip(starts, starts[1:], strict=False)])


def _held_wait(phases: Sequence[Sequence[tuple[float, float, float]]], core: float) -> float:
    """The wait of one turn beyond its CPU, from the turns' own times: the lower quartile of their wall less CPU.

    The lower quartile: a turn that shared the core with the event loop took longer than its CPU
    for that reason, which the schedule models itself.
    """
    return _lower_quartile([sum(e - s for s, e, _ in p) - sum(c for *_, c in p) / core for p in phases if p])


def _lower_quartile(waits: Sequence[float]) -> float:
    """The lower quartile of ``waits``, at least 0 (0 when there are none)."""
    return max(0.0, float(np.quantile(waits, 0.25))) if waits else 0.0


def _writer_cpu(timeline: Timeline) -> float:
    """CPU of the background writers: every thread that is neither the loop's nor a job's nor the launcher's."""
    own = LOOP_THREADS + IGNORED_THREADS
    return sum(t.cpu_s for t in timeline.threads if not t.name.startswith(own))


def _core(timeline: Timeline, window_s: float = 1.0) -> tuple[float, float, float]:
    """The 10%, 50% and 90% quantiles of the share of a core the process got while it had work.

    A window's share is the process's CPU rate plus the machine's idle cores (at most one core:
    the GIL).
    Only the windows in which the process ran at half its peak rate or more count: while it waits
    (a flush, a reply), its own rate says nothing of what the machine would have given it. Other
    processes' load changes while the sweep runs: the quantiles are the interval's ends.
    """
    rows, windows = list(timeline.samples), []
    last = rows[0] if rows else None
    for row in rows[1:]:
        assert last is not None
        dt = row[0] - last[0]
        if dt >= window_s:
            windows.append(((row[1] - last[1]) / dt, (row[2] - last[2]) / dt))
            last = row
    peak = max((own for own, _ in windows), default=0.0)
    shares = [min(1.0, own + max(0.0, timeline.cores - busy)) for own, busy in windows if own >= peak / 2 > 0]
    low, mid, high = (max(0.05, float(np.quantile(shares, q))) for q in (0.1, 0.5, 0.9)) if shares else (1.0,) * 3
    return (low, mid, high)


def _loaded_share(timeline: Timeline) -> float:
    """A fair share of the machine's cores among the threads of its 5-minute load average (0: not known).

    What the others ran for longer than the slice: an upper bound of their pressure (the load average
    counts threads waiting for I/O too), so it is said beside the interval, not in it.
    """
    if timeline.load <= 0:
        return 0.0
    own = timeline.cpu_s / timeline.wall_s if timeline.wall_s else 0.0
    return max(0.05, min(1.0, timeline.cores / (max(0.0, timeline.load - own) + 1)))
