"""Statistics over per-instance scores: percentiles and paired bootstrap CIs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_BATCH_VALUES = 1 << 20
"""Resampled values held at once by the bootstrap (8 MiB of float64 plus 8 MiB of indices)."""


def bootstrap_batch(n: int, n_resamples: int, max_values: int = MAX_BATCH_VALUES) -> int:
    """Resamples per batch so that ``batch * n`` stays within ``max_values`` (at least 1)."""
    return max(1, min(n_resamples, max_values // max(n, 1)))


def paired_bootstrap_ci(
    scores: Sequence[float],
    baseline: Sequence[float],
    *,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    max_values: int = MAX_BATCH_VALUES,
) -> tuple[float, float, float]:
    """Mean paired difference with a percentile bootstrap confidence interval.

    Instances are resampled with replacement and the mean of the per-instance
    differences ``scores - baseline`` is recomputed each time (scipy.stats.bootstrap
    over the difference vector, which keeps the pairing).

    Memory stays flat in ``n``: resamples are drawn in batches of at most
    ``max_values`` resampled values, all from one generator seeded with ``seed``,
    batch after batch. The draws are the same ``(n_resamples, n)`` index stream as
    one unbatched draw, so the interval does not depend on the batch size and
    equals scipy's unbatched result for the same seed (a test checks both).

    Args:
        scores: Per-instance scores (e.g. the clarified arm's), aligned with ``baseline``.
        baseline: Per-instance scores of the baseline (e.g. orig).
        n_resamples: Bootstrap resamples.
        confidence: Two-sided confidence level.
        seed: Seed of the resampling generator (results are reproducible).
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
    from scipy import (
        stats as sps,  # imported when used: ~0.4 s that a job's start-up need not pay
    )

    res = sps.bootstrap(
        (diffs,),
        np.mean,
        n_resamples=n_resamples,
        batch=bootstrap_batch(diffs.size, n_resamples, max_values),
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return mean, float(res.confidence_interval.low), float(res.confidence_interval.high)


def mean_ci(
    values: Sequence[float], *, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """Mean with a percentile bootstrap confidence interval.

    The unpaired special case of :func:`paired_bootstrap_ci` (baseline 0).

    Returns:
        ``(mean, ci_low, ci_high)``; NaNs for no values.
    """
    return paired_bootstrap_ci(values, [0.0] * len(values), n_resamples=n_resamples, confidence=confidence, seed=seed)


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
