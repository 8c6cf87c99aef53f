"""Many comparisons at once: Holm's step-down adjustment and the paired sign-flip permutation test.

A sweep compares every system with orig; at 95% each, 21 comparisons show about one
"significant" difference by chance alone. Holm's adjustment controls the family-wise error
rate (the chance of any false rejection) at the nominal level, under any dependence between
the tests, and is uniformly more powerful than Bonferroni.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from cts.compose.schema import Bootstrap
from cts.stats.bootstrap import MAX_BATCH_VALUES, bootstrap_batch
from cts.stats.cluster import cluster_codes

NAN = float("nan")
MAX_EXACT_CLUSTERS = 20
"""Up to 2**20 sign vectors are enumerated exactly (when no more than the resamples asked for)."""

__all__ = ["holm", "sign_flip_p_value"]


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given.

    With the m finite p-values sorted ascending, the i-th smallest (1-based) becomes
    ``max_{j <= i} min(1, (m - j + 1) · p_(j))``: rejecting where the adjusted value is
    below α is Holm's step-down procedure at family-wise level α. NaNs (a comparison
    without pairs) stay NaN and do not count in m.
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, NAN)
    finite = np.flatnonzero(np.isfinite(p))
    if finite.size == 0:
        return out.tolist()
    order = finite[np.argsort(p[finite], kind="stable")]
    m = order.size
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out.tolist()


def sign_flip_p_value(
    diffs: Sequence[float],
    clusters: Sequence[Hashable] | None = None,
    *,
    n_resamples: int = Bootstrap().n_resamples,
    seed: int = 0,
    max_values: int = MAX_BATCH_VALUES,
) -> float:
    """Two-sided paired permutation (sign-flip) p-value of a zero mean difference.

    Under the null that the two arms are exchangeable within a pair (within a cluster,
    when ``clusters`` is given), each pair's (cluster's) difference is as likely negated.
    The statistic is ``|Σ d|``; the p-value is the share of sign vectors whose statistic
    reaches the observed one. Every sign vector is enumerated when there are at most
    :data:`MAX_EXACT_CLUSTERS` units and ``2**units <= n_resamples`` (exact); otherwise
    ``n_resamples`` random sign vectors from a generator seeded with ``seed``, counted as
    ``(hits + 1) / (n_resamples + 1)`` (the observed vector is one of them).

    Returns:
        The p-value in (0, 1]; NaN for no pair.
    """
    d = np.asarray(diffs, dtype=float)
    if d.size == 0:
        return NAN
    codes = cluster_codes(clusters) if clusters is not None else np.arange(d.size)
    sums = np.bincount(codes, weights=d)
    observed = abs(float(sums.sum()))
    tol = 1e-9 * max(1.0, float(np.abs(sums).sum()))  # the same sum, added in another order
    units = sums.size
    if units <= MAX_EXACT_CLUSTERS and 2**units <= n_resamples:
        hits = _exact_hits(sums, observed - tol, max_values)
        return hits / 2**units
    hits = _random_hits(sums, observed - tol, n_resamples, seed, max_values)
    return (hits + 1) / (n_resamples + 1)


def _exact_hits(sums: np.ndarray, threshold: float, max_values: int) -> int:
    """Sign vectors (all ``2**len(sums)``) whose ``|Σ s·S|`` reaches ``threshold``."""
    units, total, hits = sums.size, 2**sums.size, 0
    batch = bootstrap_batch(units, total, max_values)
    bits = np.arange(units)
    for start in range(0, total, batch):
        vectors = np.arange(start, min(start + batch, total))[:, None] >> bits & 1
        hits += int(np.count_nonzero(np.abs((1 - 2 * vectors) @ sums) >= threshold))
    return hits


def _random_hits(sums: np.ndarray, threshold: float, n_resamples: int, seed: int, max_values: int) -> int:
    """Of ``n_resamples`` random sign vectors, those whose ``|Σ s·S|`` reaches ``threshold``."""
    rng = np.random.default_rng(seed)
    batch, hits = bootstrap_batch(sums.size, n_resamples, max_values), 0
    for start in range(0, n_resamples, batch):
        signs = 1 - 2 * rng.integers(0, 2, (min(batch, n_resamples - start), sums.size))
        hits += int(np.count_nonzero(np.abs(signs @ sums) >= threshold))
    return hits
