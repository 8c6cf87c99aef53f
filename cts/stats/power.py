"""Power and sample size of a paired difference (clarified vs orig), with clusters and repeats.

A claim "system A beats orig by delta points" is tested on the per-instance paired deltas
``d_i = score_i - orig_i`` with a two-sided t-test of mean 0. Its power at ``n`` instances is
that of the noncentral t: ``P(|T| > t_crit)`` with ``df = n_eff - 1`` and noncentrality
``delta / se``, where ``se`` is the standard error of the mean delta:

- repeats: an instance run ``r`` times contributes the mean of its ``r`` deltas, whose variance
  is ``between + within / r`` (one-way variance components over the repeats);
- clusters (instances sharing a topic or source): the design effect ``1 + (m - 1) * icc`` of
  clusters of mean size ``m`` inflates the variance, and the test has one degree of freedom
  per cluster: the t-test over cluster means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

__all__ = ["PairedDeltas", "Variance", "detectable_effect", "instances_needed", "paired_power", "variance_of"]

_MAX_N = 10_000_000


@dataclass(frozen=True)
class PairedDeltas:
    """A pilot's paired deltas: one list per instance (its repeats), and each instance's cluster.

    Attributes:
        deltas: Instance id -> its deltas (one per repeat; usually one).
        clusters: Instance id -> cluster label (empty: every instance is its own cluster).
    """

    deltas: Mapping[str, Sequence[float]]
    clusters: Mapping[str, str]


@dataclass(frozen=True)
class Variance:
    """What the power of a mean paired delta depends on, estimated from a pilot.

    Attributes:
        between: Variance of the instances' true deltas (between instances).
        within: Variance of one instance's deltas across repeats (0 without repeats).
        icc: Intra-cluster correlation of the instance deltas (0 without clusters).
        cluster_size: Mean instances per cluster (1 without clusters).
        repeats: Repeats per instance in the pilot (1 without repeats).
        n: Instances in the pilot.
    """

    between: float
    within: float = 0.0
    icc: float = 0.0
    cluster_size: float = 1.0
    repeats: int = 1
    n: int = 0

    def per_instance(self, repeats: int) -> float:
        """Variance of one instance's mean delta over ``repeats`` runs."""
        return self.between + self.within / max(1, repeats)

    @property
    def design_effect(self) -> float:
        """``1 + (m - 1) * icc``: how much clustering inflates the variance of the mean."""
        return max(1.0, 1.0 + (self.cluster_size - 1.0) * self.icc)


def variance_of(pilot: PairedDeltas) -> Variance:
    """Estimate the variance components of a pilot's deltas (see :class:`Variance`)."""
    ids = [i for i, ds in pilot.deltas.items() if len(ds)]
    if len(ids) < 2:
        raise ValueError(f"a power estimate needs at least 2 instances with a paired delta, got {len(ids)}")
    means = np.array([float(np.mean(pilot.deltas[i])) for i in ids])
    reps = [len(pilot.deltas[i]) for i in ids]
    within = _within(pilot, ids)
    r = max(1, round(float(np.mean(reps))))
    between = max(0.0, float(np.var(means, ddof=1)) - within / r)
    if between + within <= 0:
        raise ValueError("the paired deltas do not vary: a pilot without spread says nothing about power")
    icc, size = _clustering(means, [pilot.clusters.get(i, i) for i in ids])
    return Variance(between, within, icc, size, r, len(ids))


def _within(pilot: PairedDeltas, ids: Sequence[str]) -> float:
    """Pooled variance of the repeats around their instance's mean (0 when no instance repeats)."""
    groups = [np.asarray(pilot.deltas[i], dtype=float) for i in ids if len(pilot.deltas[i]) > 1]
    dof = sum(len(g) - 1 for g in groups)
    return float(sum(((g - g.mean()) ** 2).sum() for g in groups) / dof) if dof else 0.0


def _clustering(means: np.ndarray, labels: Sequence[str]) -> tuple[float, float]:
    """ICC (one-way ANOVA estimator, floored at 0) and mean cluster size of the instance means."""
    groups: dict[str, list[float]] = {}
    for value, label in zip(means, labels):
        groups.setdefault(label, []).append(float(value))
    k, n = len(groups), len(means)
    if k == n or k < 2:
        return 0.0, 1.0
    sizes = np.array([len(g) for g in groups.values()], dtype=float)
    grand = float(means.mean())
    msb = sum(len(g) * (np.mean(g) - grand) ** 2 for g in groups.values()) / (k - 1)
    msw = sum(((np.asarray(g) - np.mean(g)) ** 2).sum() for g in groups.values()) / (n - k)
    m0 = (n - (sizes**2).sum() / n) / (k - 1)  # the ANOVA estimator's size for unequal clusters
    icc = (msb - msw) / (msb + (m0 - 1) * msw) if msb + (m0 - 1) * msw > 0 else 0.0
    return max(0.0, float(icc)), float(sizes.mean())


def paired_power(n: float, delta: float, var: Variance, *, repeats: int | None = None, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test of mean delta 0 at ``n`` instances, true mean ``delta``.

    Args:
        n: Instances.
        delta: The true mean paired delta (score points).
        var: The pilot's variance components.
        repeats: Runs per instance (default: the pilot's).
        alpha: Significance level.
    """
    r = var.repeats if repeats is None else repeats
    n_clusters = n / var.cluster_size
    if n_clusters < 2:
        return float("nan")
    s2 = var.per_instance(r)
    if s2 <= 0:
        return 1.0 if delta else alpha
    df = n_clusters - 1  # the test over cluster means (over instances when there are no clusters)
    nc = abs(delta) / math.sqrt(s2 * var.design_effect / n)
    crit = stats.t.ppf(1 - alpha / 2, df)
    power = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
    if not math.isfinite(power):  # scipy's noncentral t gives up far in the tail: the normal limit there
        power = float(stats.norm.sf(crit - nc) + stats.norm.cdf(-crit - nc))
    return min(1.0, power)


def detectable_effect(
    n: float, var: Variance, *, power: float = 0.8, repeats: int | None = None, alpha: float = 0.05
) -> float:
    """The smallest true mean delta the test detects with ``power`` at ``n`` instances (the MDE)."""
    s = math.sqrt(max(var.per_instance(var.repeats if repeats is None else repeats), 1e-12))
    if n / var.cluster_size < 2:
        return float("inf")
    hi = s
    while paired_power(n, hi, var, repeats=repeats, alpha=alpha) < power:
        hi *= 2
    return float(
        optimize.brentq(lambda d: paired_power(n, d, var, repeats=repeats, alpha=alpha) - power, 0.0, hi, xtol=1e-6)
    )


def instances_needed(
    delta: float, var: Variance, *, power: float = 0.8, repeats: int | None = None, alpha: float = 0.05
) -> int:
    """The fewest instances whose test detects a true mean ``delta`` with ``power``.

    Raises:
        ValueError: ``delta`` is 0 (no sample size detects no difference).
    """
    if delta == 0:
        raise ValueError("delta must not be 0")
    lo = math.ceil(2 * var.cluster_size)  # at least 2 clusters
    if paired_power(lo, delta, var, repeats=repeats, alpha=alpha) >= power:
        return lo
    hi = lo * 2
    while paired_power(hi, delta, var, repeats=repeats, alpha=alpha) < power:
        if hi > _MAX_N:
            raise ValueError(f"more than {_MAX_N} instances would be needed for delta {delta}")
        hi *= 2
    while hi - lo > 1:  # power grows with n: bisect on integers
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if paired_power(mid, delta, var, repeats=repeats, alpha=alpha) < power else (lo, mid)
    return hi
