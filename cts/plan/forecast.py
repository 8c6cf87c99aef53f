"""A sweep's forecast from a calibration slice: calls, tokens and USD as intervals, and what is not known.

Each job ran (or an earlier run recorded) a few instances; what each instance cost is a
sample (:class:`InstanceCost`). The main run pays only for the instances no record and no
cache holds yet: ``R`` of them. Their total is forecast as ``R x`` the sample mean, with the
interval of a sum of ``R`` new draws whose mean is itself estimated from ``n`` samples
(``t_{n-1} x sd x sqrt(R + R^2 / n)``, at the planning confidence). Work the jobs share (the orig
arm once per setting, identical UA questions) is in the samples as the cache hits and joined
calls it was in the calibration, which ran the jobs together as the sweep will.

What the slice does not tell is never a number: a job with no run in the slice is
``unknown`` with the reason (:attr:`JobSlice.missing`: the spend limit stopped the slice first,
its job failed), a job with one run has an expected value but no interval, and the sweep's total
over such jobs is marked incomplete (:attr:`JobForecast.incomplete`). The wall time is the
schedule's (:mod:`cts.plan.walltime`), set on the sweep's forecast.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from cts.compose.schema import Plan

__all__ = [
    "COUNTS",
    "BatchForecast",
    "BatchShape",
    "Interval",
    "InstanceCost",
    "JobForecast",
    "JobSlice",
    "forecast_job",
    "forecast_sweep",
    "latency_of",
    "sum_interval",
]

COUNTS = ("calls", "tokens_in", "tokens_out", "tokens_reasoning", "usd")
"""What is forecast per instance; ``calls`` are the requests sent (the billed ones)."""
BATCH_COUNTS = ("calls_live", "usd_batch")
"""Also in every sample's counts: the requests of the roles not batched, the USD with the batched ones at batch prices."""


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
        counts: ``calls`` (requests sent), tokens, ``usd``: see :data:`COUNTS` (and :data:`BATCH_COUNTS`).
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
class BatchShape:
    """A job's batched roles (``services.llm.batch.roles``) as the forecast needs them.

    Attributes:
        roles: The batched accounting roles.
        stages: Dependent batched stages on a run's critical path: batch turnarounds one run waits for.
        window: The completion window (``24h``), ``window_s`` in seconds: the longest a turnaround takes.
        unpriced: Batched roles whose batch price the slice cannot tell (their models' discounts differ).
    """

    roles: tuple[str, ...]
    stages: int
    window: str
    window_s: float
    unpriced: tuple[str, ...] = ()


@dataclass(frozen=True)
class BatchForecast:
    """What the sweep pays and takes with its batched roles in batches (beside :class:`JobForecast`'s live figures).

    Attributes:
        usd: The USD with the batched roles at their batch prices, the others at live prices.
        calls_live: The requests the roles not batched send.
        unpriced: Models without a price and batched roles without a known batch price.
        shape: The job's batched roles (the sweep's: the most stages of its jobs).
        turnarounds: Batch turnarounds in a row: ``shape.stages`` per run times ``waves``.
        waves: Runs of a job wait in turn for a slot (``job_concurrency`` in flight); the most of any job.
        wall_live: The live part's wall time (the sweep's; None: not forecast).
    """

    usd: Interval
    calls_live: Interval
    unpriced: tuple[str, ...]
    shape: BatchShape
    turnarounds: int = 0
    waves: int = 1
    wall_live: Interval | None = None

    @property
    def wall_high(self) -> float | None:
        """The wall time's high end: the live part's, plus the whole window per turnaround (None: not forecast).

        Its low end is the live part's; it has no expected value: how long a batch takes is not known before.
        """
        if self.wall_live is None:
            return None
        return self.wall_live.high + self.turnarounds * self.shape.window_s


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
        missing: Why the slice has no run of this job (empty when it has).
        cut: Why the slice has fewer runs of it than it should (empty when it has them all).
        batch: How the sweep's batched roles run in this job (None: the sweep batches no role).
    """

    name: str
    n_total: int
    n_free: int
    samples: tuple[InstanceCost, ...]
    unpriced: tuple[str, ...] = ()
    concurrency: Mapping[str, int] = field(default_factory=dict)
    job_concurrency: int = 8
    missing: str = ""
    cut: str = ""
    batch: BatchShape | None = None

    @property
    def remaining(self) -> int:
        """Runs (instances x repeats) the main run pays for."""
        return max(0, self.n_total - self.n_free)

    @property
    def unknown(self) -> str:
        """Why nothing of this job is known: it has runs to pay for and the slice has none of it."""
        if self.samples or not self.remaining:
            return ""
        return self.missing or "the calibration slice has no run of this job"


@dataclass(frozen=True)
class JobForecast:
    """A forecast of one job or of the sweep (``name`` ``sweep``).

    With ``unpriced`` models the USD is unknown: ``usd`` is then the priced models' part only.

    Attributes:
        unknown: Why nothing of it is known (its numbers are then zeros, never shown).
        incomplete: The sweep's: the jobs whose forecast is unknown (its numbers cover the others).
        no_interval: Why its intervals are unknown (one run in the slice): only the expected values stand.
        notes: What else a reader must know (a slice cut short).
        wall_s: The wall time (None: not forecast; the sweep's only, see :mod:`cts.plan.walltime`).
        wall_note: Why the wall time is unknown or what it covers.
        batch: With batched roles: the batch prices' USD, the live requests and the batch mode's wall time.
    """

    name: str
    n_total: int
    n_paid: int
    calls: Interval
    tokens_in: Interval
    tokens_out: Interval
    tokens_reasoning: Interval
    usd: Interval
    wall_s: Interval | None = None
    unpriced: tuple[str, ...] = ()
    unknown: str = ""
    incomplete: tuple[str, ...] = ()
    no_interval: str = ""
    notes: tuple[str, ...] = ()
    wall_note: str = ""
    batch: BatchForecast | None = None

    @property
    def usd_high_known(self) -> bool:
        """Whether the USD's high end bounds the whole sweep (every job known, priced, with an interval)."""
        return not (self.unknown or self.incomplete or self.no_interval or self.unpriced)


def sum_interval(values: Sequence[float], remaining: int, confidence: float = Plan().confidence) -> Interval:
    """The total of ``remaining`` more draws like ``values`` (see the module docstring).

    With one value there is no spread to go by: the interval is the expected value alone
    (:attr:`JobForecast.no_interval` says so).
    """
    if remaining <= 0 or not values:
        return ZERO
    x = np.asarray(values, dtype=float)
    expected = remaining * float(x.mean())
    if len(x) < 2:
        return Interval(expected, expected, expected)
    from scipy import stats  # here, not at import: a launch without a forecast does not pay ~0.5 s for it

    quantile = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1))
    half = quantile * float(x.std(ddof=1)) * math.sqrt(remaining + remaining**2 / len(x))
    return Interval(max(0.0, expected - half), expected, expected + half)


def latency_of(samples: Sequence[InstanceCost]) -> Interval:
    """Seconds per call: the fastest seen, a low quantile (calls that did not wait) and the median.

    A call's measured time includes waiting for an endpoint slot in the calibration itself,
    so the service time is the low end of what was seen, and the median bounds it from above.
    """
    lat = np.asarray([v for s in samples for v in s.latencies], dtype=float)
    if not len(lat):
        return ZERO
    return Interval(float(lat.min()), float(np.quantile(lat, 0.1)), float(np.median(lat)))


def forecast_job(job: JobSlice, confidence: float = Plan().confidence) -> JobForecast:
    """The forecast of one job's calls, tokens and USD (its wall time is the sweep's schedule's)."""
    sums = {c: sum_interval([s.counts.get(c, 0.0) for s in job.samples], job.remaining, confidence) for c in COUNTS}
    lone = len(job.samples) == 1 and job.remaining > 0
    return JobForecast(
        job.name,
        job.n_total,
        job.remaining,
        sums["calls"],
        sums["tokens_in"],
        sums["tokens_out"],
        sums["tokens_reasoning"],
        sums["usd"],
        unpriced=job.unpriced,
        unknown=job.unknown,
        no_interval="1 run in the slice" if lone else "",
        notes=(job.cut,) if job.cut and not job.unknown else (),
        batch=_job_batch(job, confidence),
    )


def _job_batch(job: JobSlice, confidence: float) -> BatchForecast | None:
    if job.batch is None:
        return None
    usd, calls = (
        sum_interval([s.counts.get(c, 0.0) for s in job.samples], job.remaining, confidence) for c in BATCH_COUNTS[::-1]
    )
    waves = math.ceil(job.remaining / max(1, job.job_concurrency))
    unpriced = (*job.unpriced, *job.batch.unpriced)
    return BatchForecast(usd, calls, unpriced, job.batch, job.batch.stages * waves, waves)


def forecast_sweep(jobs: Sequence[JobSlice], confidence: float = Plan().confidence) -> JobForecast:
    """The sweep's forecast: the known jobs' totals, with the interval of the per-instance sweep totals.

    Jobs over the same instances share work (one job computes the orig arm another reuses):
    their costs are summed per instance first, so the interval reflects the sweep's spread,
    not the sum of each job's. Jobs whose forecast is unknown are left out and named in
    :attr:`JobForecast.incomplete`.
    """
    known = [j for j in jobs if not j.unknown]
    sums = {c: _sweep_sum(known, c, confidence) for c in COUNTS}
    lone = [j.name for j in known if len(j.samples) == 1 and j.remaining > 0]
    return JobForecast(
        "sweep",
        sum(j.n_total for j in jobs),
        sum(j.remaining for j in jobs),
        sums["calls"],
        sums["tokens_in"],
        sums["tokens_out"],
        sums["tokens_reasoning"],
        sums["usd"],
        unpriced=tuple(sorted({m for j in jobs for m in j.unpriced})),
        unknown="no job of the sweep has a run in the calibration slice" if not known and jobs else "",
        incomplete=tuple(j.name for j in jobs if j.unknown) if known else (),
        no_interval=f"{', '.join(lone)}: 1 run in the slice" if lone else "",
        notes=tuple(j.cut for j in known if j.cut)[:1],
        batch=_sweep_batch(jobs, known, confidence),
    )


def _sweep_batch(jobs: Sequence[JobSlice], known: Sequence[JobSlice], confidence: float) -> BatchForecast | None:
    """The sweep's batch figures: its jobs run at once, so the turnarounds in a row are its slowest job's."""
    shapes = [j.batch for j in jobs if j.batch is not None]
    if not shapes:
        return None
    per_job = [f for f in (_job_batch(j, confidence) for j in known) if f is not None]
    slowest = max(per_job, key=lambda f: f.turnarounds, default=None)
    stages = max(shapes, key=lambda b: b.stages)
    roles = tuple(sorted({r for b in shapes for r in b.roles}))
    shape = BatchShape(
        roles, stages.stages, stages.window, stages.window_s, tuple(sorted({u for b in shapes for u in b.unpriced}))
    )
    return BatchForecast(
        _sweep_sum(known, "usd_batch", confidence),
        _sweep_sum(known, "calls_live", confidence),
        tuple(sorted({m for j in jobs for m in (*j.unpriced, *(j.batch.unpriced if j.batch else ()))})),
        shape,
        slowest.turnarounds if slowest else 0,
        slowest.waves if slowest else 1,
    )


def _sweep_sum(jobs: Sequence[JobSlice], count: str, confidence: float) -> Interval:
    remaining = {j.remaining for j in jobs}
    ids = [{s.id for s in j.samples} for j in jobs]
    if len(remaining) != 1 or any(i != ids[0] for i in ids):  # not the same instances: the jobs' sum
        return sum(
            (sum_interval([s.counts.get(count, 0.0) for s in j.samples], j.remaining, confidence) for j in jobs), ZERO
        )
    per_instance = {i: 0.0 for i in ids[0]} if ids else {}
    for j in jobs:
        for s in j.samples:
            per_instance[s.id] += s.counts.get(count, 0.0)
    return sum_interval(list(per_instance.values()), remaining.pop(), confidence) if remaining else ZERO
