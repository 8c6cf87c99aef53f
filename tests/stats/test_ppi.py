"""The prediction-powered mean against the published formulas and the authors' own ``ppi_py`` numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from cts.stats.ppi import ppi_lambda, ppi_mean_ci

Y = [100.0, 75.0, 75.0, 100.0, 50.0, 75.0, 100.0, 25.0, 0.0, 25.0, 25.0, 100.0]
F = [100.0, 96.4, 78.08, 100.0, 62.9, 86.57, 100.0, 23.7, 7.71, 39.95, 19.56, 100.0]
FU = [
    91.84, 77.16, 31.88, 100.0, 58.64, 20.75, 100.0, 21.59, 92.53, 91.59, 9.19, 1.59, 78.0, 15.62, 0.0, 58.75,
    100.0, 56.11, 100.0, 100.0, 100.0, 97.39, 51.24, 60.03, 28.37, 59.27, 21.13, 27.21, 100.0, 16.99, 19.45, 0.0,
    100.0, 89.47, 88.08, 28.37, 82.03, 45.57, 64.89, 4.73,
]  # fmt: skip
# ppi_py 0.2.3 (Angelopoulos et al.'s package): ppi_mean_pointestimate and ppi_mean_ci(alpha=0.05) on Y, F, FU
PPI_PY = {
    None: (55.09023037, 44.65245274, 65.52800799),
    1.0: (51.83066667, 40.00147431, 63.65985902),
    0.0: (62.5, 42.91738112, 82.08261888),
}


@pytest.mark.parametrize("lam", [None, 1.0, 0.0])
def test_the_estimate_and_interval_match_ppi_py(lam: float | None) -> None:
    got = ppi_mean_ci(Y, F, FU, confidence=0.95, lam=lam)
    assert (got.mean, got.low, got.high) == pytest.approx(PPI_PY[lam], abs=1e-6)
    assert (got.n_labelled, got.n_unlabelled) == (12, 40)


def test_ppi_is_the_judge_mean_corrected_by_the_labelled_gap() -> None:
    """Angelopoulos et al. 2023: theta = mean(f~) - mean(f - y); se^2 = var(f~)/N + var(f - y)/n."""
    y, f, fu = np.array(Y), np.array(F), np.array(FU)
    theta = fu.mean() - (f - y).mean()
    se = math.sqrt(fu.var() / len(fu) + (f - y).var() / len(y))
    got = ppi_mean_ci(Y, F, FU, lam=1.0)
    assert got.mean == pytest.approx(theta)
    assert (got.low, got.high) == pytest.approx((theta - norm.ppf(0.975) * se, theta + norm.ppf(0.975) * se))


def test_ppi_plus_plus_tunes_the_weight_as_published() -> None:
    """PPI++ (Angelopoulos, Duchi, Zrnic 2024), the mean: lam = Cov(y, f) / ((1 + n/N) Var(f over n + N))."""
    y, f, fu = np.array(Y), np.array(F), np.array(FU)
    expected = np.cov(y, f, ddof=0)[0, 1] / ((1 + len(y) / len(fu)) * np.var(np.concatenate([f, fu]), ddof=1))
    assert ppi_lambda(y, f, fu) == pytest.approx(min(1.0, expected))
    assert ppi_lambda(y, np.full(12, 50.0), np.full(40, 50.0)) == 0.0  # a constant judge carries nothing
    assert ppi_lambda(y, -np.array(F), -np.array(FU)) == 0.0  # an anti-correlated one is clipped to 0


def test_a_perfect_judge_gives_the_mean_of_everything() -> None:
    y = [10.0, 20.0, 30.0, 40.0]
    got = ppi_mean_ci(y, y, [50.0, 60.0], lam=1.0)
    assert got.mean == pytest.approx(np.mean(y) + np.mean([50.0, 60.0]) - np.mean(y))


def test_too_few_labels_give_no_interval() -> None:
    got = ppi_mean_ci([50.0], [60.0], [1.0, 2.0])
    assert math.isnan(got.mean) and math.isnan(got.low) and got.n_labelled == 1
    with pytest.raises(ValueError, match="2 human values but 1 judge"):
        ppi_mean_ci([1.0, 2.0], [1.0], [])
