"""Prediction-powered inference for a mean: the judge on every item, corrected by people on a random few.

With human values ``y`` on ``n`` labelled items, the judge's values ``f`` on the same items and
``f~`` on the ``N`` unlabelled ones (Angelopoulos et al., *Prediction-powered inference*, Science
2023; PPI++, Angelopoulos, Duchi and Zrnic, 2024):

    theta(lam) = mean(y) + lam * (mean(f~) - mean(f))
    se(lam)^2  = var(y - lam * f) / n + lam^2 * var(f~) / N

``lam = 1`` is PPI (the judge's mean corrected by the mean judge-minus-human gap); ``lam = 0`` is the
classical mean of the labelled items alone; PPI++ tunes ``lam`` from the data,
``lam = Cov(y, f) / ((1 + n / N) Var(f over all n + N))``, clipped to [0, 1], so the interval is never
wider than the classical one by more than sampling noise. The interval is the normal one,
``theta +- z * se``. Variances are population variances (ddof 0), as in the authors' ``ppi_py``,
whose ``ppi_mean_ci`` the tests check these numbers against.

The labelled items must be a uniform random sample of the items the mean is over (within a
stratum when the sample was stratified: estimate per stratum).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PPIEstimate", "ppi_lambda", "ppi_mean_ci"]

NAN = float("nan")


@dataclass(frozen=True)
class PPIEstimate:
    """A prediction-powered mean and its interval."""

    mean: float
    low: float
    high: float
    n_labelled: int
    n_unlabelled: int
    lam: float
    """The weight of the judge (1: PPI; tuned: PPI++; NaN when nothing was labelled)."""


def ppi_lambda(y: np.ndarray, f: np.ndarray, f_unlabelled: np.ndarray) -> float:
    """PPI++'s power-tuning weight for a mean, clipped to [0, 1] (0 when the judge does not vary)."""
    n, big_n = len(y), len(f_unlabelled)
    if n < 2 or big_n < 1:
        return 0.0
    cov = float(np.mean((y - y.mean()) * (f - f.mean())))
    var = float(np.var(np.concatenate([f, f_unlabelled]), ddof=1))
    if var <= 0.0:
        return 0.0
    return float(np.clip(cov / ((1.0 + n / big_n) * var), 0.0, 1.0))


def ppi_mean_ci(
    y: Sequence[float],
    f: Sequence[float],
    f_unlabelled: Sequence[float],
    confidence: float = 0.95,
    lam: float | None = None,
) -> PPIEstimate:
    """The prediction-powered mean of the human values and its two-sided normal interval.

    Args:
        y: Human values of the labelled items.
        f: The judge's values of the same items, in the same order.
        f_unlabelled: The judge's values of the items nobody labelled.
        confidence: Level of the interval.
        lam: The judge's weight: None tunes it (PPI++), 1 is PPI, 0 the labelled items alone.

    Returns:
        The estimate; NaN bounds when fewer than two items are labelled.
    """
    ys, fs, fu = (np.asarray(v, dtype=float) for v in (y, f, f_unlabelled))
    if len(ys) != len(fs):
        raise ValueError(f"{len(ys)} human values but {len(fs)} judge values of the labelled items")
    if len(ys) < 2:
        return PPIEstimate(NAN, NAN, NAN, len(ys), len(fu), NAN)
    weight = ppi_lambda(ys, fs, fu) if lam is None else float(lam)
    theta = float(ys.mean() + weight * (fu.mean() - fs.mean())) if len(fu) else float(ys.mean())
    var = float(np.var(ys - weight * fs) / len(ys))
    if len(fu):
        var += float(np.var(weight * fu) / len(fu))
    from scipy.stats import norm  # here, not at import: a sweep's report without labels does not pay ~0.5 s

    half = float(norm.ppf(0.5 + confidence / 2.0)) * math.sqrt(var)
    return PPIEstimate(theta, theta - half, theta + half, len(ys), len(fu), weight)
