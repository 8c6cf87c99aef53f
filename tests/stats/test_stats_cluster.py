"""The independent cluster bootstrap, its design effect and its p-value, against independent checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cts.stats.bootstrap import Resampling, paired_bootstrap_ci
from cts.stats.cluster import (
    bootstrap_p_value,
    cluster_bootstrap_ci,
    cluster_codes,
    cluster_mean_distribution,
    design_effect,
)
from cts.stats.compare import paired_comparison


def brute_force_cluster_bootstrap(
    diffs: list[float], labels: list[str], n_resamples: int, seed: int, confidence: float
) -> tuple[float, float, list[float]]:
    """The cluster bootstrap written as loops: per resample, draw clusters, pool their instances, average.

    It draws one cluster index at a time from the same generator, which yields the same
    stream as the vectorised batches (numpy's ``integers`` fills arrays element by element).
    """
    order = list(dict.fromkeys(labels))  # clusters in first-seen order
    members = {c: [d for d, lab in zip(diffs, labels) if lab == c] for c in order}
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(n_resamples):
        pooled: list[float] = []
        for _ in range(len(order)):
            pooled += members[order[int(rng.integers(0, len(order)))]]
        means.append(sum(pooled) / len(pooled))
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(low), float(high), means


def clustered_sample(n_clusters: int, size: int, cluster_sd: float, seed: int) -> tuple[np.ndarray, list[str]]:
    """Differences ``u_c + e_i`` with a cluster effect of SD ``cluster_sd`` and unit noise."""
    rng = np.random.default_rng(seed)
    effects = rng.normal(0.0, cluster_sd, n_clusters)
    diffs = np.repeat(effects, size) + rng.normal(0.0, 1.0, n_clusters * size)
    return diffs, [f"c{c}" for c in range(n_clusters) for _ in range(size)]


def test_matches_a_brute_force_loop_on_a_seeded_example() -> None:
    # 4 topics of unequal size (3, 2, 4, 1), listed out of order.
    labels = ["a", "b", "a", "c", "c", "a", "d", "c", "b", "c"]
    scores = [40.0, 10.0, 55.0, 0.0, 20.0, 35.0, 90.0, 5.0, 25.0, 15.0]
    baseline = [30.0, 20.0, 30.0, 10.0, 10.0, 30.0, 40.0, 10.0, 20.0, 10.0]
    diffs = [s - b for s, b in zip(scores, baseline)]
    low, high, means = brute_force_cluster_bootstrap(diffs, labels, 2000, 7, 0.9)
    got = cluster_bootstrap_ci(scores, baseline, labels, Resampling(2000, 0.9, 7), max_values=9)
    assert got.mean == pytest.approx(np.mean(diffs))
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-9)
    assert got.n_clusters == 4
    dist = cluster_mean_distribution(np.asarray(diffs), cluster_codes(labels), n_resamples=2000, seed=7)
    assert dist == pytest.approx(means, abs=1e-9)
    # p-value by hand from the loop's draws: twice the smaller tail at 0, +1 / +1
    tail = min(sum(m <= 0 for m in means), sum(m >= 0 for m in means))
    assert got.p_value == pytest.approx(min(1.0, 2 * (tail + 1) / 2001))


def test_the_batch_size_does_not_change_the_interval() -> None:
    diffs, labels = clustered_sample(30, 4, 1.0, seed=3)
    whole = cluster_bootstrap_ci(diffs, np.zeros_like(diffs), labels, Resampling(n_resamples=999, seed=1))
    tiny = cluster_bootstrap_ci(diffs, np.zeros_like(diffs), labels, Resampling(n_resamples=999, seed=1), max_values=31)
    assert whole == tiny


def test_singleton_clusters_are_the_paired_bootstrap() -> None:
    rng = np.random.default_rng(11)
    scores, baseline = rng.uniform(0, 100, 57), rng.uniform(0, 100, 57)
    naive = paired_bootstrap_ci(scores, baseline, Resampling(3000, seed=5))
    clustered = cluster_bootstrap_ci(
        scores, baseline, [f"id{i}" for i in range(57)], Resampling(n_resamples=3000, seed=5)
    )
    assert (clustered.mean, clustered.low, clustered.high) == pytest.approx(naive, abs=1e-9)
    assert clustered.n_clusters == 57 and clustered.design_effect == 1.0


def test_design_effect_is_about_one_without_a_cluster_effect() -> None:
    diffs, labels = clustered_sample(300, 5, 0.0, seed=21)
    # E[deff] = 1; its SD is about sqrt(2 / 300) * (5 - 1) / ... < 0.2 here
    assert design_effect(diffs, cluster_codes(labels)) == pytest.approx(1.0, abs=0.3)


def test_design_effect_grows_with_a_strong_cluster_effect() -> None:
    # cluster SD 1, noise SD 1: intra-cluster correlation 0.5, so deff ~ 1 + (10 - 1) * 0.5 = 5.5
    diffs, labels = clustered_sample(200, 10, 1.0, seed=4)
    deff = design_effect(diffs, cluster_codes(labels))
    assert 4.0 < deff < 7.0
    clustered = cluster_bootstrap_ci(diffs, np.zeros_like(diffs), labels, Resampling(n_resamples=4000, seed=0))
    naive = paired_bootstrap_ci(diffs, np.zeros_like(diffs), Resampling(4000, seed=0))
    ratio = (clustered.high - clustered.low) / (naive[2] - naive[1])
    assert ratio == pytest.approx(math.sqrt(deff), rel=0.05)  # widths scale with the standard error


def test_design_effect_is_the_ratio_of_the_bootstrap_variances() -> None:
    diffs, labels = clustered_sample(40, 6, 0.7, seed=8)
    codes = cluster_codes(labels)
    clustered = cluster_mean_distribution(diffs, codes, n_resamples=20_000, seed=1)
    naive = cluster_mean_distribution(diffs, np.arange(diffs.size), n_resamples=20_000, seed=2)
    # equal cluster sizes: the plug-in variances are what the two bootstraps estimate
    assert clustered.var() / naive.var() == pytest.approx(design_effect(diffs, codes), rel=0.06)


def test_degenerate_inputs() -> None:
    empty = cluster_bootstrap_ci([], [], [])
    assert math.isnan(empty.mean) and empty.n_clusters == 0
    same = cluster_bootstrap_ci([3.0, 4.0, 5.0], [1.0, 2.0, 3.0], ["a", "a", "b"])
    assert (same.low, same.high) == (2.0, 2.0) and math.isnan(same.design_effect)
    one = cluster_bootstrap_ci([3.0, 1.0], [0.0, 0.0], ["a", "a"])
    assert one.n_clusters == 1 and math.isnan(one.low)
    with pytest.raises(ValueError, match="a cluster per pair"):
        cluster_bootstrap_ci([1.0], [0.0], ["a", "b"])


def test_bootstrap_p_value_tails() -> None:
    assert bootstrap_p_value(np.array([1.0, 2.0, 3.0])) == pytest.approx(2 / 4)  # 2 * (0 + 1) / (3 + 1)
    assert bootstrap_p_value(np.array([-1.0, 0.0, 1.0, 2.0])) == pytest.approx(1.0)  # 2 * (2 + 1) / 5 capped
    assert math.isnan(bootstrap_p_value(np.array([])))


def test_unclustered_comparison_keeps_the_paired_interval() -> None:
    rng = np.random.default_rng(2)
    scores, baseline = rng.uniform(0, 100, 30), rng.uniform(0, 100, 30)
    c = paired_comparison(scores, baseline, resampling=Resampling(n_resamples=2000, seed=3))
    assert (c.mean, c.low, c.high) == paired_bootstrap_ci(scores, baseline, Resampling(2000, seed=3))
    assert not c.clustered and 0 < c.p_value <= 1
    with pytest.raises(ValueError, match="p_value must be"):
        paired_comparison(scores, baseline, p_value="t-test")  # type: ignore[arg-type]
