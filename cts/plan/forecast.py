"""A sweep's forecast from a calibration slice: calls, tokens, USD and wall time as intervals.

Each job ran (or an earlier run recorded) a few instances; what each instance cost is a
sample (:class:`InstanceCost`). The main run pays only for the instances no record and no
cache holds yet: ``R`` of them. Their total is forecast as ``R x`` the sample mean, with the
interval of a sum of ``R`` new draws whose mean is itself estimated from ``n`` samples
(``t_{n-1} x sd x sqrt(R + R^2 / n)``, at the planning confidence). Work the jobs share (the orig
arm once per setting, identical UA questions) is in the samples as the cache hits and joined
calls it was in the calibration, which ran the jobs together as the sweep will.

Wall time: each endpoint serves its requests ``concurrency`` at a time at the measured
latency, and no instance is faster than its critical path; the calibration's own wall time
beyond that model is the sweep's fixed overhead (job set-up, tracking, the adaptive limit's
slow start).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

__all__ = ["COUNTS", "Interval", "InstanceCost", "JobForecast", "JobSlice", "Timing", "forecast_job", "forecast_sweep"]

COUNTS = ("calls", "tokens_in", "tokens_out", "tokens_reasoning", "usd")
"""What is forecast per instance; ``calls`` are the requests sent (the billed ones)."""


@dataclass(frozen=True)
class Interval:
    """A forecast: its low end, expected value and high end."""

    low: float
    expected: float
    high: float

    def __add__(self, other: Interval) -> Interval:
        return Interval(self.low + other.low, self.expected + other.expected, self.high + other.high)

    def contains(self, value: float, rel: float = 1e-9) -> bool:
        """Whether ``value`` lies within the interval (with a relative float tolerance)."""
        tol = rel * max(1.0, abs(self.high))
        return self.low - tol <= value <= self.high + tol


ZERO = Interval(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class InstanceCost:
    """What one instance of a job cost (its record's usage, fresh calls only).

    Attributes:
        id: The instance id.
        counts: ``calls`` (requests sent), tokens, ``usd``: see :data:`COUNTS`.
        by_endpoint: Requests sent per endpoint.
        latencies: Seconds per call of each role that sent every call it made.
        elapsed_s: The instance's wall time.
    """

    id: str
    counts: Mapping[str, float]
    by_endpoint: Mapping[str, float] = field(default_factory=dict)
    latencies: tuple[float, ...] = ()
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class JobSlice:
    """One job's calibration: its samples and what the main run will do.

    Attributes:
        name: The job (its dir name: the swept factors).
        n_total: Runs the main run covers: its instances times ``repeats``.
        n_free: Of those, runs whose record or cached replies exist (the slice's among them).
        samples: The slice's runs (one per instance and repeat).
        unpriced: Models the job calls that have no price (its USD is then unknown).
        concurrency: Endpoint -> calls in flight it takes.
        job_concurrency: Instances in flight in the job.
    """

    name: str
    n_total: int
    n_free: int
    samples: tuple[InstanceCost, ...]
    unpriced: tuple[str, ...] = ()
    concurrency: Mapping[str, int] = field(default_factory=dict)
    job_concurrency: int = 8

    @property
    def remaining(self) -> int:
        """Runs (instances x repeats) the main run pays for."""
        return max(0, self.n_total - self.n_free)


@dataclass(frozen=True)
class Timing:
    """What the calibration measured beyond the samples.

    Attributes:
        overhead_s: Its wall time beyond the wall-time model (job set-up, tracking, slow start).
        cpu_per_call_s: Its process's CPU seconds per request sent: a sweep runs in one process,
            on one core at most, so its requests cannot go faster than this (job set-up included,
            which errs on the slow side).
    """

    overhead_s: float = 0.0
    cpu_per_call_s: float = 0.0


@dataclass(frozen=True)
class JobForecast:
    """A forecast of one job or of the sweep (``name`` ``sweep``).

    With ``unpriced`` models the USD is unknown: ``usd`` is then the priced models' part only.
    """

    name: str
    n_total: int
    n_paid: int
    calls: Interval
    tokens_in: Interval
    tokens_out: Interval
    tokens_reasoning: Interval
    usd: Interval
    wall_s: Interval
    unpriced: tuple[str, ...] = ()


def sum_interval(values: Sequence[float], remaining: int, confidence: float = 0.95) -> Interval:
    """The total of ``remaining`` more draws like ``values`` (see the module docstring)."""
    if remaining <= 0 or not values:
        return ZERO
    x = np.asarray(values, dtype=float)
    expected = remaining * float(x.mean())
    if len(x) < 2:
        return Interval(0.0, expected, 2 * expected)
    quantile = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1))
    half = quantile * float(x.std(ddof=1)) * math.sqrt(remaining + remaining**2 / len(x))
    return Interval(max(0.0, expected - half), expected, expected + half)


def _latency(samples: Sequence[InstanceCost]) -> Interval:
    """Seconds per call: the fastest seen, a low quantile (calls that did not wait) and the median.

    A call's measured time includes waiting for an endpoint slot in the calibration itself,
    so the service time is the low end of what was seen, and the median bounds it from above.
    """
    lat = np.asarray([v for s in samples for v in s.latencies], dtype=float)
    if not len(lat):
        return ZERO
    return Interval(float(lat.min()), float(np.quantile(lat, 0.1)), float(np.median(lat)))


def _critical_path(samples: Sequence[InstanceCost]) -> Interval:
    elapsed = np.asarray([s.elapsed_s for s in samples], dtype=float)
    return Interval(float(elapsed.min()), float(np.median(elapsed)), float(elapsed.max())) if len(elapsed) else ZERO


def wall_time(jobs: Sequence[JobSlice], timing: Timing, confidence: float = 0.95) -> Interval:
    """Wall time of ``jobs`` run together: max(critical path x rounds, busiest endpoint's queue, CPU).

    The low end is the first two alone, at the fastest latency seen: no run is quicker. The
    expected value adds the overhead the calibration measured; the high end takes the median
    latency (which holds the calibration's own waits for a slot) and the process's CPU per
    request (a loaded machine makes a sweep CPU-bound).
    """
    samples = [s for j in jobs for s in j.samples]
    if not samples or all(j.remaining == 0 for j in jobs):
        return Interval(0.0, timing.overhead_s, timing.overhead_s)
    latency, path = _latency(samples), _critical_path(samples)
    rounds = max(math.ceil(j.remaining / max(1, j.job_concurrency)) for j in jobs)
    ends = []
    for pick in ("low", "expected", "high"):
        queue = 0.0
        for endpoint in {e for j in jobs for e in j.concurrency}:
            calls = sum(getattr(_endpoint_calls(j, endpoint, confidence), pick) for j in jobs)
            width = min(j.concurrency[endpoint] for j in jobs if endpoint in j.concurrency)
            queue = max(queue, calls * getattr(latency, pick) / max(1, width))
        bound = max(getattr(path, pick) * rounds, queue)
        if pick == "high":
            calls = sum(_calls(j, confidence).high for j in jobs)
            bound = max(bound, calls * timing.cpu_per_call_s)
        ends.append(bound + (0.0 if pick == "low" else timing.overhead_s))
    return Interval(*ends)


def _calls(job: JobSlice, confidence: float) -> Interval:
    return sum_interval([s.counts.get("calls", 0.0) for s in job.samples], job.remaining, confidence)


def _endpoint_calls(job: JobSlice, endpoint: str, confidence: float) -> Interval:
    return sum_interval([s.by_endpoint.get(endpoint, 0.0) for s in job.samples], job.remaining, confidence)


def forecast_job(job: JobSlice, timing: Timing, confidence: float = 0.95) -> JobForecast:
    """The forecast of one job run alone (its wall time as if no other job shared the endpoints)."""
    sums = {c: sum_interval([s.counts.get(c, 0.0) for s in job.samples], job.remaining, confidence) for c in COUNTS}
    return JobForecast(
        job.name,
        job.n_total,
        job.remaining,
        sums["calls"],
        sums["tokens_in"],
        sums["tokens_out"],
        sums["tokens_reasoning"],
        sums["usd"],
        wall_time([job], timing, confidence),
        job.unpriced,
    )


def forecast_sweep(
    jobs: Sequence[JobSlice], timing: Timing, confidence: float = 0.95, together: bool = True
) -> JobForecast:
    """The sweep's forecast: the jobs' totals, with the interval of the per-instance sweep totals.

    Jobs over the same instances share work (one job computes the orig arm another reuses):
    their costs are summed per instance first, so the interval reflects the sweep's spread,
    not the sum of each job's. ``together``: the launcher runs the jobs at once on one schedule
    (``hydra/launcher=cts``); else one after another, and their wall times add up.
    """
    sums = {c: _sweep_sum(jobs, c, confidence) for c in COUNTS}
    wall = (
        wall_time(jobs, timing, confidence)
        if together
        else sum((wall_time([j], timing, confidence) for j in jobs), ZERO)
    )
    unpriced = tuple(sorted({m for j in jobs for m in j.unpriced}))
    return JobForecast(
        "sweep",
        sum(j.n_total for j in jobs),
        sum(j.remaining for j in jobs),
        sums["calls"],
        sums["tokens_in"],
        sums["tokens_out"],
        sums["tokens_reasoning"],
        sums["usd"],
        wall,
        unpriced,
    )


def _sweep_sum(jobs: Sequence[JobSlice], count: str, confidence: float) -> Interval:
    remaining = {j.remaining for j in jobs}
    ids = [{s.id for s in j.samples} for j in jobs]
    if len(remaining) != 1 or any(i != ids[0] for i in ids):  # not the same instances: the jobs' sum
        return sum(
            (sum_interval([s.counts.get(count, 0.0) for s in j.samples], j.remaining, confidence) for j in jobs), ZERO
        )
    per_instance = {i: 0.0 for i in ids[0]}
    for j in jobs:
        for s in j.samples:
            per_instance[s.id] += s.counts.get(count, 0.0)
    return sum_interval(list(per_instance.values()), remaining.pop(), confidence)
