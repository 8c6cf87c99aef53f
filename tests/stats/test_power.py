"""The sample-size planner against Monte-Carlo simulations of synthetic paired deltas."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from cts.stats.power import PairedDeltas, Variance, detectable_effect, instances_needed, paired_power, variance_of

SIMULATIONS = 4000


def simulated_power(draw, n_sims: int = SIMULATIONS, alpha: float = 0.05, seed: int = 1) -> float:
    """Share of simulated studies whose t-test over the drawn means rejects mean 0."""
    rng = np.random.default_rng(seed)
    return float(np.mean([stats.ttest_1samp(draw(rng), 0).pvalue < alpha for _ in range(n_sims)]))


def pilot(deltas: dict[str, list[float]], clusters: dict[str, str] | None = None) -> Variance:
    return variance_of(PairedDeltas(deltas, clusters or {}))


@pytest.mark.parametrize(("n", "delta", "sd"), [(12, 8.0, 10.0), (30, 3.0, 9.0), (60, 2.0, 12.0)])
def test_power_matches_a_simulation_of_independent_paired_deltas(n: int, delta: float, sd: float) -> None:
    rng = np.random.default_rng(0)
    var = pilot({f"i{i}": [float(d)] for i, d in enumerate(rng.normal(delta, sd, 5000))})  # a large pilot
    simulated = simulated_power(lambda r: r.normal(delta, sd, n))
    assert paired_power(n, delta, var) == pytest.approx(simulated, abs=0.05)


def test_power_with_clusters_matches_a_simulation_of_clustered_deltas() -> None:
    """Instances in clusters of 4 with ICC 0.3: the test runs over cluster means (one df per cluster)."""
    size, icc, sd, delta, n = 4, 0.3, 10.0, 4.0, 48
    tau, sigma = sd * np.sqrt(icc), sd * np.sqrt(1 - icc)

    def clustered(r: np.random.Generator, k: int) -> np.ndarray:
        return delta + r.normal(0, tau, (k, 1)) + r.normal(0, sigma, (k, size))

    big = clustered(np.random.default_rng(0), 3000)
    var = pilot(
        {f"c{c}i{i}": [float(big[c, i])] for c in range(3000) for i in range(size)},
        {f"c{c}i{i}": f"c{c}" for c in range(3000) for i in range(size)},
    )
    assert var.icc == pytest.approx(icc, abs=0.03) and var.cluster_size == size
    simulated = simulated_power(lambda r: clustered(r, n // size).mean(axis=1))
    assert paired_power(n, delta, var) == pytest.approx(simulated, abs=0.05)
    assert paired_power(n, delta, var) < paired_power(n, delta, Variance(sd**2)) - 0.1  # clustering costs power


def test_power_with_repeats_matches_a_simulation_of_instance_means() -> None:
    """Each instance run 3 times: its mean delta has variance between + within / 3."""
    between, within, delta, n, r = 36.0, 64.0, 3.0, 25, 3

    def runs(g: np.random.Generator, k: int) -> np.ndarray:
        return delta + g.normal(0, np.sqrt(between), (k, 1)) + g.normal(0, np.sqrt(within), (k, r))

    big = runs(np.random.default_rng(0), 4000)
    var = pilot({f"i{i}": list(map(float, big[i])) for i in range(4000)})
    assert var.repeats == r and var.within == pytest.approx(within, rel=0.05)
    simulated = simulated_power(lambda g: runs(g, n).mean(axis=1))
    assert paired_power(n, delta, var) == pytest.approx(simulated, abs=0.05)
    assert paired_power(n, delta, var, repeats=1) < paired_power(n, delta, var)  # fewer repeats, less power


def test_mde_and_needed_instances_invert_the_power() -> None:
    var = Variance(100.0)
    mde = detectable_effect(50, var, power=0.8)
    assert paired_power(50, mde, var) == pytest.approx(0.8, abs=1e-4)
    need = instances_needed(2.0, var, power=0.8)
    assert paired_power(need, 2.0, var) >= 0.8 > paired_power(need - 1, 2.0, var)
    assert need == pytest.approx(((1.96 + 0.8416) * 10 / 2) ** 2, rel=0.02)  # the normal-theory size, nearly


def test_a_pilot_without_spread_or_pairs_is_refused() -> None:
    with pytest.raises(ValueError, match="do not vary"):
        pilot({f"i{i}": [2.0] for i in range(10)})
    with pytest.raises(ValueError, match="at least 2 instances"):
        pilot({"i0": [1.0]})


def test_a_wide_spread_far_in_the_tail_still_has_a_power() -> None:
    """scipy's noncentral t returns nan far in its tail (nc ~ 14 at n=200, sd 43): the normal limit takes over."""
    var = Variance(43.46**2)
    assert paired_power(200, 43.0, var) == 1.0
    assert detectable_effect(200, var) == pytest.approx((1.96 + 0.8416) * 43.46 / 200**0.5, rel=0.01)
