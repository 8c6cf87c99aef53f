"""Statistics over per-instance scores: percentiles and paired bootstrap CIs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np

from cts.compose.schema import Bootstrap

MAX_BATCH_VALUES = 1 << 20
"""Resampled values held at once by the bootstrap (8 MiB of float64 plus 8 MiB of indices)."""


@dataclass(frozen=True)
class Resampling:
    """How a bootstrap interval resamples: the job's ``bootstrap`` settings and its ``seed``.

    Attributes:
        n_resamples: Bootstrap resamples.
        confidence: Two-sided confidence level of the interval.
        seed: Seed of the resampling generator (the same seed draws the same resamples).
    """

    n_resamples: int = Bootstrap().n_resamples
    confidence: float = Bootstrap().confidence
    seed: int = 0


DEFAULT_RESAMPLING = Resampling()
"""The schema's ``bootstrap`` defaults and seed 0."""


def bootstrap_batch(n: int, n_resamples: int, max_values: int = MAX_BATCH_VALUES) -> int:
    """Resamples per batch so that ``batch * n`` stays within ``max_values`` (at least 1)."""
    return max(1, min(n_resamples, max_values // max(n, 1)))


@dataclass
class _Shared:
    """What a :func:`shared_draws` block computed once: index draws and mean distributions, by input."""

    draws: dict[tuple[int, int, int], np.ndarray] = field(default_factory=dict)
    means: dict[tuple[bytes, int, int, int], np.ndarray] = field(default_factory=dict)


_SHARED: ContextVar[_Shared | None] = ContextVar("cts_bootstrap_shared", default=None)


@contextmanager
def shared_draws() -> Iterator[None]:
    """Within the block, compute each bootstrap draw and distribution once and reuse it.

    Every interval of a sweep report uses one seed and one resample count, so its jobs of
    ``n`` pairs all draw the same ``(n_resamples, n)`` indices, and some intervals are over the
    very same differences (a job's delta CI, its p-value's distribution, the "always" gate's CI).
    Inside the block, a draw that fits in one batch is kept per ``(n, n_resamples, seed)`` and a
    distribution per input, so each is computed once; results are the same numbers as outside
    (the same draws, the same arithmetic). What the block kept (8 MiB per distinct ``n`` and
    80 KiB per distribution at 10,000 resamples) is dropped when it ends.
    """
    token = _SHARED.set(_Shared())
    try:
        yield
    finally:
        _SHARED.reset(token)


def resample_indices(n: int, n_resamples: int, seed: int, max_values: int = MAX_BATCH_VALUES) -> Iterator[np.ndarray]:
    """The bootstrap's resampled indices, batch by batch: ``default_rng(seed).integers(0, n, (batch, n))``.

    One generator draws every batch, so the rows are the same whatever the batch size
    (:func:`bootstrap_batch` of ``max_values``). Inside :func:`shared_draws`, a draw that fits in
    one batch is made once per ``(n, n_resamples, seed)`` and given out read-only.
    """
    batch = bootstrap_batch(n, n_resamples, max_values)
    shared = _SHARED.get()
    if shared is not None and batch == n_resamples:
        key = (n, n_resamples, seed)
        if key not in shared.draws:
            shared.draws[key] = np.random.default_rng(seed).integers(0, n, (n_resamples, n))
            shared.draws[key].setflags(write=False)
        yield shared.draws[key]
        return
    rng = np.random.default_rng(seed)
    for start in range(0, n_resamples, batch):
        yield rng.integers(0, n, (min(batch, n_resamples - start), n))


def bootstrap_means(
    diffs: np.ndarray, *, n_resamples: int = Bootstrap().n_resamples, seed: int = 0, max_values: int = MAX_BATCH_VALUES
) -> np.ndarray:
    """Bootstrap distribution of the mean of ``diffs``: ``scipy.stats.bootstrap``'s for ``np.mean``, draw for draw.

    Each resample is ``np.mean(diffs[indices], axis=-1)`` over :func:`resample_indices` (the
    index stream and the arithmetic scipy uses with ``rng=np.random.default_rng(seed)``). Inside
    :func:`shared_draws` the distribution of an input is computed once.

    Returns:
        ``n_resamples`` resampled means (read-only inside :func:`shared_draws`).
    """
    diffs = np.ascontiguousarray(diffs, dtype=float)
    shared = _SHARED.get()
    key = (diffs.tobytes(), n_resamples, seed, max_values)
    if shared is not None and key in shared.means:
        return shared.means[key]
    parts = [np.mean(diffs[i], axis=-1) for i in resample_indices(diffs.size, n_resamples, seed, max_values)]
    out = parts[0] if len(parts) == 1 else np.concatenate(parts)
    if shared is not None:
        out.setflags(write=False)
        shared.means[key] = out
    return out


def paired_bootstrap_ci(
    scores: Sequence[float],
    baseline: Sequence[float],
    resampling: Resampling = DEFAULT_RESAMPLING,
    *,
    max_values: int = MAX_BATCH_VALUES,
) -> tuple[float, float, float]:
    """Mean paired difference with a percentile bootstrap confidence interval.

    Instances are resampled with replacement and the mean of the per-instance
    differences ``scores - baseline`` is recomputed each time (scipy.stats.bootstrap
    over the difference vector, which keeps the pairing).

    Memory stays flat in ``n``: resamples are drawn in batches of at most
    ``max_values`` resampled values, all from one generator seeded with ``seed``,
    batch after batch (:func:`bootstrap_means`). The draws are the same ``(n_resamples, n)``
    index stream as one unbatched draw, so the interval does not depend on the batch size and
    equals scipy's unbatched result for the same seed (a test checks both). Inside
    :func:`shared_draws`, draws and distributions are computed once and reused.

    Args:
        scores: Per-instance scores (e.g. the clarified arm's), aligned with ``baseline``.
        baseline: Per-instance scores of the baseline (e.g. orig).
        resampling: Resamples, confidence level and seed (the same seed gives the same interval).
        max_values: Upper bound on resampled values held at once (memory, not results).

    Returns:
        ``(mean_delta, ci_low, ci_high)``; NaNs when there is no pair, and a
        zero-width interval when every difference is identical.
    """
    diffs = np.asarray(scores, dtype=float) - np.asarray(baseline, dtype=float)
    if diffs.size == 0:
        return (float("nan"),) * 3
    mean = float(diffs.mean())
    if diffs.size == 1 or np.all(diffs == diffs[0]):
        return mean, mean, mean
    # scipy.stats.bootstrap(method="percentile") without its per-call validation and draw: its
    # distribution (bootstrap_means) and its quantile, so the same numbers (a test compares)
    alpha = np.asarray((1.0 - resampling.confidence) / 2.0, dtype=float)
    dist = bootstrap_means(diffs, n_resamples=resampling.n_resamples, seed=resampling.seed, max_values=max_values)
    low, high = linear_quantiles(dist, np.stack((alpha, 1 - alpha), axis=-1))
    return mean, float(low), float(high)


def linear_quantiles(values: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``scipy.stats.quantile(values, p, axis=-1)`` (method ``linear``) for 1-D ``values``: the same floats.

    scipy's arithmetic (Hyndman-Fan's definition 7), step for step, so that an interval is
    bit for bit scipy's (a test compares; ``np.quantile`` differs in the last bits) while a job's
    end and a sweep report need not import scipy.stats (about 0.5 s). NaN in ``values`` gives NaN.
    """
    y = np.sort(np.asarray(values, dtype=float))
    if y.size == 0 or np.isnan(y[-1]):
        return np.full(p.shape, np.nan)
    n = np.asarray(float(y.size))
    jg = p * n + (1 - p)
    jp1 = jg // 1
    j = jp1 - 1
    g = jg % 1
    g[j < 0] = 0
    j = np.clip(j, 0.0, n - 1)
    jp1 = np.clip(jp1, 0.0, n - 1)
    return (1 - g) * y[j.astype(np.int64)] + g * y[jp1.astype(np.int64)]


def mean_ci(values: Sequence[float], resampling: Resampling = DEFAULT_RESAMPLING) -> tuple[float, float, float]:
    """Mean with a percentile bootstrap confidence interval.

    The unpaired special case of :func:`paired_bootstrap_ci` (baseline 0).

    Returns:
        ``(mean, ci_low, ci_high)``; NaNs for no values.
    """
    return paired_bootstrap_ci(values, [0.0] * len(values), resampling)


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b between two score vectors over the same items (rank agreement).

    Returns:
        Tau in [-1, 1]; NaN with fewer than two items, or when either vector is constant.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size != y.size:
        raise ValueError(f"kendall_tau needs aligned vectors, got {x.size} and {y.size} items")
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    from scipy import stats as sps

    return float(sps.kendalltau(x, y).statistic)


def cohen_kappa(a: Sequence[str], b: Sequence[str], labels: Sequence[str] | None = None) -> float:
    """Cohen's kappa between two raters' labels of the same items.

    Args:
        a: Labels of rater A.
        b: Labels of rater B, aligned with ``a``.
        labels: The label set (default: the labels seen).

    Returns:
        ``(p_o - p_e) / (1 - p_e)``; NaN for no items or when chance agreement is 1
        (both raters used one and the same label for everything).
    """
    if len(a) != len(b):
        raise ValueError(f"cohen_kappa needs aligned labels, got {len(a)} and {len(b)} items")
    if not a:
        return float("nan")
    cats = list(labels) if labels is not None else sorted(set(a) | set(b))
    index = {c: i for i, c in enumerate(cats)}
    table = np.zeros((len(cats), len(cats)))
    for x, y in zip(a, b):
        table[index[x], index[y]] += 1
    table /= table.sum()
    p_o = float(np.trace(table))
    p_e = float(table.sum(axis=1) @ table.sum(axis=0))
    return float("nan") if p_e >= 1.0 else (p_o - p_e) / (1.0 - p_e)
