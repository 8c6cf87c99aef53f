"""Variance components of scores repeated within instances: the spread of repeats and its sources.

A job run ``repeats`` times per instance gives, per instance, a group of scores. The
one-way random-effects model ``y_ij = mu + a_i + e_ij`` splits their variance into a part
*between* instances (``var(a)``: what the instances differ by) and a part *within*
instances (``var(e)``: run-to-run noise of the stages that were re-sampled). The
estimators are the ANOVA (method-of-moments) ones, valid for unequal group sizes
(Searle, Casella and McCulloch 1992, ch. 3); the between part is clipped at 0.

Variance by stage: when only stage ``s`` is re-sampled per repeat and every other stage
is replayed from the cache, the within-instance variance of that job is the variance
stage ``s`` causes (with everything upstream held fixed), and between + within is the
score's whole variance. :func:`stage_shares` puts the stages side by side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

NAN = float("nan")


@dataclass(frozen=True)
class Components:
    """Variance components of grouped scores (one group per instance)."""

    between: float
    """Variance between instances (of their true means), clipped at 0."""
    within: float
    """Variance within instances (between repeats of one instance)."""
    n_groups: int
    """Instances with at least one score."""
    n_values: int

    @property
    def total(self) -> float:
        """The score's variance: between + within."""
        return self.between + self.within

    @property
    def icc(self) -> float:
        """Share of the variance between instances (intraclass correlation ICC(1)); NaN when total is 0."""
        return self.between / self.total if self.total > 0 else NAN


def one_way(groups: Sequence[Sequence[float]]) -> Components:
    """ANOVA estimates of the between- and within-group variance.

    Args:
        groups: Per instance, the scores of its repeats (empty groups are ignored).

    Returns:
        The components; NaNs when there are fewer than two groups or no group has two values.
    """
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    sizes = np.array([a.size for a in arrays], dtype=float)
    n_groups, n_values = len(arrays), int(sizes.sum())
    if n_groups < 2 or n_values == n_groups:
        return Components(NAN, NAN, n_groups, n_values)
    means = np.array([a.mean() for a in arrays])
    grand = float(np.concatenate(arrays).mean())
    ms_within = sum(float(((a - m) ** 2).sum()) for a, m in zip(arrays, means)) / (n_values - n_groups)
    ms_between = float((sizes * (means - grand) ** 2).sum()) / (n_groups - 1)
    n0 = (n_values - float((sizes**2).sum()) / n_values) / (n_groups - 1)  # the mean group size, adjusted
    between = max(0.0, (ms_between - ms_within) / n0)
    return Components(between, ms_within, n_groups, n_values)


def mean_within_sd(groups: Sequence[Sequence[float]]) -> float:
    """Mean over instances with two or more repeats of the SD of their scores (ddof 1); NaN if none."""
    sds = [float(np.std(g, ddof=1)) for g in groups if len(g) >= 2]
    return float(np.mean(sds)) if sds else NAN


@dataclass(frozen=True)
class StageShare:
    """The variance one re-sampled stage causes, and its share of the score's variance."""

    stage: str
    variance: float
    """Within-instance variance of the job that re-sampled only this stage."""
    share: float
    """``variance`` over the score's variance (pooled over the stage jobs)."""
    n_groups: int


def stage_shares(by_stage: Mapping[str, Sequence[Sequence[float]]]) -> tuple[list[StageShare], float, float]:
    """Each stage's share of the score's variance, from one stage-variance job per stage.

    The score's variance is the mean over the jobs of between + within (each job
    estimates the same quantity: the stages it holds fixed move into its between
    part). What no stage's re-sampling reaches (the instances' own spread, and any
    interaction between stages) is the remainder.

    Args:
        by_stage: Per stage, the per-instance score groups of the job that re-sampled only that stage.

    Returns:
        The shares (in the order given), the score's variance and the remainder's share.
    """
    parts = {s: one_way(g) for s, g in by_stage.items()}
    totals = [c.total for c in parts.values() if math.isfinite(c.total)]
    total = float(np.mean(totals)) if totals else NAN
    shares = [StageShare(s, c.within, c.within / total if total > 0 else NAN, c.n_groups) for s, c in parts.items()]
    known = [x.share for x in shares if math.isfinite(x.share)]
    remainder = 1.0 - sum(known) if known else NAN
    return shares, total, remainder
