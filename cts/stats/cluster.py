"""Cluster bootstrap of the paired mean difference, its p-value, and the design effect of clustering.

Instances that share a topic or a source (a cluster) are not independent: resampling
them one by one understates the spread of the mean (Miller 2024, "Adding Error Bars to
Evals"). The independent cluster bootstrap resamples whole clusters with replacement and
takes every instance of each; with one instance per cluster it is the paired bootstrap of
:mod:`cts.stats.bootstrap`, draw for draw (same seed, same index stream, same interval).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from cts.stats.bootstrap import DEFAULT_RESAMPLING, MAX_BATCH_VALUES, Resampling, resample_indices

NAN = float("nan")

__all__ = [
    "ClusteredCI",
    "bootstrap_p_value",
    "cluster_bootstrap_ci",
    "cluster_codes",
    "cluster_mean_distribution",
    "design_effect",
]


@dataclass(frozen=True)
class ClusteredCI:
    """The mean paired difference with its cluster bootstrap interval."""

    mean: float
    low: float
    high: float
    n_clusters: int
    design_effect: float
    """Clustered over naive variance of the mean difference (:func:`design_effect`)."""
    p_value: float
    """Two-sided bootstrap p-value of a zero mean difference (:func:`bootstrap_p_value`)."""


def cluster_codes(labels: Sequence[Hashable]) -> np.ndarray:
    """Integer code per item, numbering clusters in the order they first appear (0, 1, ...).

    First-seen order keeps singleton clusters in item order, which makes the cluster
    bootstrap of singletons draw exactly what the paired bootstrap draws.
    """
    index: dict[Hashable, int] = {}
    return np.fromiter((index.setdefault(c, len(index)) for c in labels), dtype=np.intp, count=len(labels))


def cluster_mean_distribution(
    diffs: np.ndarray, codes: np.ndarray, *, n_resamples: int, seed: int, max_values: int = MAX_BATCH_VALUES
) -> np.ndarray:
    """Bootstrap distribution of the mean of ``diffs`` when whole clusters are resampled.

    Each resample draws as many clusters as there are, with replacement, and takes the
    mean over every instance of the drawn clusters (sum of cluster sums over the number
    of instances drawn). Resamples are drawn in batches of at most ``max_values`` drawn
    clusters, from one generator seeded with ``seed``: the index stream, hence the result,
    does not depend on the batch size (:func:`cts.stats.bootstrap.resample_indices`, shared
    inside :func:`cts.stats.bootstrap.shared_draws`).

    Args:
        diffs: Per-instance differences.
        codes: Cluster code per instance (:func:`cluster_codes`), ``0..n_clusters-1``.
        n_resamples: Bootstrap resamples.
        seed: Seed of the resampling generator.
        max_values: Upper bound on drawn clusters held at once (memory, not results).

    Returns:
        ``n_resamples`` resampled means.
    """
    sums = np.bincount(codes, weights=diffs)
    sizes = np.bincount(codes).astype(float)
    n_clusters = sums.size
    equal = bool(np.all(sizes == sizes[0]))  # then every resample holds the same number of instances
    out = np.empty(n_resamples)
    start = 0
    for drawn in resample_indices(n_clusters, n_resamples, seed, max_values):
        drawn_sizes = sizes[0] * n_clusters if equal else sizes[drawn].sum(axis=-1)
        out[start : start + drawn.shape[0]] = sums[drawn].sum(axis=-1) / drawn_sizes
        start += drawn.shape[0]
    return out


def bootstrap_p_value(distribution: np.ndarray) -> float:
    """Two-sided p-value of a zero mean from its bootstrap distribution.

    Twice the smaller tail share at zero, ``(#{θ* <= 0} + 1) / (B + 1)`` or
    ``(#{θ* >= 0} + 1) / (B + 1)``, capped at 1: the smallest level at which the
    percentile interval of that level excludes zero (so p < 0.05 exactly when the 95%
    interval, up to interpolation, lies on one side of zero). The +1 keeps it above 0:
    B resamples cannot show a p-value below about 2 / B.
    """
    if distribution.size == 0:
        return NAN
    tail = min(np.count_nonzero(distribution <= 0), np.count_nonzero(distribution >= 0))
    return float(min(1.0, 2.0 * (tail + 1) / (distribution.size + 1)))


def design_effect(diffs: np.ndarray, codes: np.ndarray) -> float:
    """Variance of the mean difference under clustering over its variance as if instances were independent.

    Both are plug-in (what the two bootstraps estimate): ``Σ_c (S_c - m_c·d̄)² / n²`` for
    cluster sums ``S_c`` of sizes ``m_c``, over ``Σ_i (d_i - d̄)² / n²``. Exactly 1 with
    one instance per cluster; about ``1 + (m - 1)·ρ`` for clusters of size m whose
    instances correlate by ρ.

    Returns:
        The ratio; NaN when every difference is the same (no variance to inflate).
    """
    centred = diffs - diffs.mean() if diffs.size else diffs
    naive = float(centred @ centred)
    if naive <= 0.0:
        return NAN
    per_cluster = np.bincount(codes, weights=centred)
    return float(per_cluster @ per_cluster) / naive


def cluster_bootstrap_ci(
    scores: Sequence[float],
    baseline: Sequence[float],
    clusters: Sequence[Hashable],
    resampling: Resampling = DEFAULT_RESAMPLING,
    *,
    max_values: int = MAX_BATCH_VALUES,
) -> ClusteredCI:
    """Mean paired difference with a percentile interval from the independent cluster bootstrap.

    Args:
        scores: Per-instance scores (e.g. the clarified arm's), aligned with ``baseline``.
        baseline: Per-instance scores of the baseline (e.g. orig).
        clusters: Cluster label per instance (a topic, a source id), aligned with ``scores``.
        resampling: Resamples, confidence level and seed of the bootstrap.
        max_values: Upper bound on drawn clusters held at once (memory, not results).

    Returns:
        The mean, interval, cluster count, design effect and p-value. NaNs when there is
        no pair; a zero-width interval (p-value 1 at zero, else that of a constant) when
        every difference is identical; a NaN interval for one cluster of several instances
        (there is no between-cluster spread to resample).
    """
    diffs = np.asarray(scores, dtype=float) - np.asarray(baseline, dtype=float)
    if len(clusters) != diffs.size:
        raise ValueError(f"cluster_bootstrap_ci needs a cluster per pair, got {len(clusters)} for {diffs.size}")
    if diffs.size == 0:
        return ClusteredCI(NAN, NAN, NAN, 0, NAN, NAN)
    codes = cluster_codes(clusters)
    n_clusters, mean = int(codes.max()) + 1, float(diffs.mean())
    deff = design_effect(diffs, codes)
    if diffs.size == 1 or np.all(diffs == diffs[0]):
        p_value = 1.0 if mean == 0 else 2.0 / (resampling.n_resamples + 1)
        return ClusteredCI(mean, mean, mean, n_clusters, deff, p_value)
    if n_clusters == 1:
        return ClusteredCI(mean, NAN, NAN, 1, deff, NAN)
    dist = cluster_mean_distribution(
        diffs, codes, n_resamples=resampling.n_resamples, seed=resampling.seed, max_values=max_values
    )
    alpha = (1.0 - resampling.confidence) / 2.0
    low, high = np.quantile(dist, [alpha, 1.0 - alpha])
    return ClusteredCI(mean, float(low), float(high), n_clusters, deff, bootstrap_p_value(dist))
