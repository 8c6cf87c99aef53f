"""One comparison with orig: the paired interval (clustered when clusters are given) and a p-value."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from cts.stats.bootstrap import DEFAULT_RESAMPLING, Resampling, bootstrap_means, paired_bootstrap_ci
from cts.stats.cluster import bootstrap_p_value, cluster_bootstrap_ci
from cts.stats.multiplicity import sign_flip_p_value

NAN = float("nan")
PValueTest = Literal["bootstrap", "permutation"]
P_VALUE_TESTS: tuple[str, ...] = ("bootstrap", "permutation")

__all__ = ["P_VALUE_TESTS", "Comparison", "PValueTest", "paired_comparison"]


@dataclass(frozen=True)
class Comparison:
    """Mean paired difference, its interval and p-value; the naive interval beside a clustered one."""

    mean: float
    low: float
    high: float
    p_value: float
    n_clusters: int | None = None
    """Clusters resampled; None when instances were resampled one by one."""
    design_effect: float = NAN
    naive_low: float = NAN
    naive_high: float = NAN

    @property
    def clustered(self) -> bool:
        """Whether the interval resampled clusters."""
        return self.n_clusters is not None


def paired_comparison(
    scores: Sequence[float],
    baseline: Sequence[float],
    clusters: Sequence[Hashable] | None = None,
    resampling: Resampling = DEFAULT_RESAMPLING,
    *,
    p_value: PValueTest = "bootstrap",
) -> Comparison:
    """Compare aligned per-instance scores with a baseline's.

    Without ``clusters`` the interval is :func:`~cts.stats.bootstrap.paired_bootstrap_ci`'s,
    unchanged; the bootstrap p-value comes from the same draws (same seed, same index
    stream). With ``clusters`` the interval and p-value come from the cluster bootstrap
    (:func:`~cts.stats.cluster.cluster_bootstrap_ci`) and the naive interval is kept
    beside it. ``p_value="permutation"`` takes the p-value from the paired sign-flip test
    instead (flipping whole clusters when clustered).
    """
    if p_value not in P_VALUE_TESTS:
        raise ValueError(f"p_value must be one of {', '.join(P_VALUE_TESTS)}, got {p_value!r}")
    n_resamples, seed = resampling.n_resamples, resampling.seed
    mean, low, high = paired_bootstrap_ci(scores, baseline, resampling)
    diffs = np.asarray(scores, dtype=float) - np.asarray(baseline, dtype=float)
    permuted = (
        sign_flip_p_value(diffs, clusters, n_resamples=n_resamples, seed=seed) if p_value == "permutation" else None
    )
    if clusters is None:
        # the CI's distribution: the cluster bootstrap of singletons' draws and sums (bar a zero's sign,
        # which the p-value counts on both sides), computed once inside shared_draws
        boot = NAN if diffs.size == 0 else bootstrap_p_value(bootstrap_means(diffs, n_resamples=n_resamples, seed=seed))
        return Comparison(mean, low, high, boot if permuted is None else permuted)
    c = cluster_bootstrap_ci(scores, baseline, clusters, resampling)
    return Comparison(
        c.mean, c.low, c.high, c.p_value if permuted is None else permuted, c.n_clusters, c.design_effect, low, high
    )
