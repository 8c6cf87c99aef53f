"""Agreement on ordinal labels (none < partial < full): weighted Cohen's kappa, Krippendorff's alpha, their CIs.

Labels are coded 0 (none), 1 (partial), 2 (full): the order of the credit they give.

- **Weighted kappa** (Cohen 1968) between two raters: ``1 - Σ w·O / Σ w·E`` over the
  confusion matrix ``O`` and the one chance predicts from its margins, ``E``; ``linear``
  weights ``|i - j|`` (full vs none is twice full vs partial, as the credits 1 / 0.5 / 0 are)
  or ``quadratic`` ``(i - j)²``. It is computed from counts, so a bootstrap sums the
  resampled clusters' confusion matrices and evaluates every resample at once.
- **Krippendorff's alpha** (ordinal) over any number of raters with missing labels, from the
  ``krippendorff`` package (Castro 2017, numpy only): the ceiling of agreement among people,
  and a judge's agreement with them on the same scale.

Bootstrap intervals resample whole clusters with replacement, as :mod:`cts.stats.cluster`
does for the paired delta (same generator, same index stream): the instances (a nugget's
labels are not independent of its instance's other nuggets), or the dataset's clusters
(``dataset.cluster_field``) when set.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from cts.stats.bootstrap import DEFAULT_RESAMPLING, MAX_BATCH_VALUES, Resampling, bootstrap_batch
from cts.stats.cluster import cluster_codes

NAN = float("nan")
N_CATEGORIES = 3
"""none, partial, full."""
Weights = Literal["linear", "quadratic"]

__all__ = [
    "Estimate",
    "alpha_ci",
    "cluster_draws",
    "confusion_counts",
    "kappa_ci",
    "kappa_from_counts",
    "krippendorff_alpha",
    "percentile_interval",
    "weighted_kappa",
]


@dataclass(frozen=True)
class Estimate:
    """A statistic with its cluster bootstrap percentile interval."""

    value: float
    low: float
    high: float
    n: int
    """Units the statistic is over (labelled pairs for kappa, nuggets for alpha)."""
    n_clusters: int


def _weights(kind: Weights, c: int = N_CATEGORIES) -> np.ndarray:
    i, j = np.indices((c, c))
    if kind == "linear":
        return np.abs(i - j).astype(float)
    if kind == "quadratic":
        return ((i - j) ** 2).astype(float)
    raise ValueError(f"weights must be linear or quadratic, got {kind!r}")


def confusion_counts(a: Sequence[int], b: Sequence[int], c: int = N_CATEGORIES) -> np.ndarray:
    """``c x c`` counts of (rater A's code, rater B's code) over aligned items."""
    x, y = np.asarray(a, dtype=np.intp), np.asarray(b, dtype=np.intp)
    if x.shape != y.shape:
        raise ValueError(f"need aligned codes, got {x.size} and {y.size}")
    return np.bincount(x * c + y, minlength=c * c).reshape(c, c).astype(float)


def kappa_from_counts(counts: np.ndarray, weights: Weights = "linear") -> np.ndarray:
    """Weighted kappa of confusion matrices ``(..., c, c)``: one value per leading index; NaN where undefined.

    Undefined when there is no item, or when chance disagreement is 0 (both raters gave one and
    the same label to everything).
    """
    w = _weights(weights, counts.shape[-1])
    n = counts.sum(axis=(-2, -1))
    rows, cols = counts.sum(axis=-1), counts.sum(axis=-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = rows[..., :, None] * cols[..., None, :] / n[..., None, None]
        observed_d = (w * counts).sum(axis=(-2, -1))
        expected_d = (w * expected).sum(axis=(-2, -1))
        kappa = 1.0 - observed_d / expected_d
    return np.where((n > 0) & (expected_d > 0), kappa, NAN)


def weighted_kappa(a: Sequence[int], b: Sequence[int], weights: Weights = "linear") -> float:
    """Weighted Cohen's kappa between two raters' ordinal codes (0..2) of the same items."""
    return float(kappa_from_counts(confusion_counts(a, b), weights))


def krippendorff_alpha(data: np.ndarray) -> float:
    """Ordinal Krippendorff's alpha of a ``raters x units`` matrix of codes 0..2 (NaN = not labelled).

    Units that fewer than two raters labelled carry no pairable value and are left out (the
    package's rule). NaN with fewer than two pairable units' worth of values, or when every value
    is the same (no disagreement is possible: alpha is undefined).
    """
    import krippendorff  # numpy only; imported when used

    matrix = np.asarray(data, dtype=float)
    pairable = (~np.isnan(matrix)).sum(axis=0) >= 2
    values = matrix[:, pairable]
    finite = values[~np.isnan(values)]
    if finite.size < 2 or np.all(finite == finite[0]):
        return NAN
    return float(
        krippendorff.alpha(reliability_data=values, level_of_measurement="ordinal", value_domain=[0.0, 1.0, 2.0])
    )


def cluster_draws(
    n_clusters: int, n_resamples: int, seed: int, max_values: int = MAX_BATCH_VALUES
) -> Iterator[np.ndarray]:
    """Batches of resampled cluster indices ``(batch, n_clusters)``, drawn with replacement.

    The same stream as :func:`cts.stats.cluster.cluster_mean_distribution` draws for one seed:
    ``default_rng(seed).integers(0, n_clusters, ...)``, row after row, whatever the batch size.
    """
    rng = np.random.default_rng(seed)
    batch = bootstrap_batch(n_clusters, n_resamples, max_values)
    for start in range(0, n_resamples, batch):
        yield rng.integers(0, n_clusters, (min(batch, n_resamples - start), n_clusters))


def percentile_interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile interval of a bootstrap distribution (resamples where it is undefined left out)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return NAN, NAN
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(finite, [alpha, 1.0 - alpha])
    return float(low), float(high)


def kappa_ci(
    a: Sequence[int],
    b: Sequence[int],
    clusters: Sequence[Hashable],
    resampling: Resampling = DEFAULT_RESAMPLING,
    *,
    weights: Weights = "linear",
) -> Estimate:
    """Weighted kappa of two raters' codes with a cluster bootstrap interval.

    Args:
        a: Rater A's codes (0 none, 1 partial, 2 full).
        b: Rater B's codes of the same items.
        clusters: Cluster of each item (its instance, or the dataset's cluster of that instance).
        resampling: Resamples, confidence level and seed of the bootstrap.
        weights: ``linear`` or ``quadratic`` disagreement weights.
    """
    if len(clusters) != len(a):
        raise ValueError(f"need a cluster per item, got {len(clusters)} for {len(a)}")
    value = weighted_kappa(a, b, weights)
    if not len(a):
        return Estimate(NAN, NAN, NAN, 0, 0)
    codes = cluster_codes(clusters)
    n_clusters = int(codes.max()) + 1
    c = N_CATEGORIES
    cells = np.asarray(a, dtype=np.intp) * c + np.asarray(b, dtype=np.intp)
    per_cluster = np.zeros((n_clusters, c * c))
    np.add.at(per_cluster, (codes, cells), 1.0)
    dist = np.concatenate(
        [
            kappa_from_counts(per_cluster[drawn].sum(axis=1).reshape(-1, c, c), weights)
            for drawn in cluster_draws(n_clusters, resampling.n_resamples, resampling.seed, MAX_BATCH_VALUES // (c * c))
        ]
    )
    return Estimate(value, *percentile_interval(dist, resampling.confidence), len(a), n_clusters)


def alpha_ci(
    data: np.ndarray,
    clusters: Sequence[Hashable],
    resampling: Resampling = DEFAULT_RESAMPLING,
) -> Estimate:
    """Ordinal Krippendorff's alpha of a ``raters x units`` matrix with a cluster bootstrap interval.

    Args:
        data: Codes 0..2, NaN where a rater did not label a unit.
        clusters: Cluster of each unit (column).
        resampling: Resamples, confidence level and seed of the bootstrap.
    """
    matrix = np.asarray(data, dtype=float)
    if len(clusters) != matrix.shape[1]:
        raise ValueError(f"need a cluster per unit, got {len(clusters)} for {matrix.shape[1]}")
    if not matrix.shape[1]:
        return Estimate(NAN, NAN, NAN, 0, 0)
    codes = cluster_codes(clusters)
    n_clusters = int(codes.max()) + 1
    members = [np.flatnonzero(codes == c) for c in range(n_clusters)]
    values = np.array(
        [
            krippendorff_alpha(matrix[:, np.concatenate([members[i] for i in drawn])])
            for batch in cluster_draws(n_clusters, resampling.n_resamples, resampling.seed)
            for drawn in batch
        ]
    )
    interval = percentile_interval(values, resampling.confidence)
    return Estimate(krippendorff_alpha(matrix), *interval, matrix.shape[1], n_clusters)
