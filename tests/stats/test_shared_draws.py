"""Shared bootstrap draws: the same numbers as scipy and as unshared draws, each draw made once."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from cts.stats import bootstrap as bootstrap_module
from cts.stats.bootstrap import (
    Resampling,
    bootstrap_means,
    mean_ci,
    paired_bootstrap_ci,
    resample_indices,
    shared_draws,
)
from cts.stats.cluster import bootstrap_p_value, cluster_bootstrap_ci, cluster_mean_distribution
from cts.stats.compare import paired_comparison


def pairs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 101, n).astype(float)  # restore scores are on a 0-100 grid: ties and zero deltas
    return np.clip(base + rng.integers(-30, 31, n), 0, 100), base


@pytest.mark.parametrize("n", [2, 9, 100, 333])
def test_the_distribution_is_scipys_resample_for_resample(n: int) -> None:
    system, baseline = pairs(n, n)
    diffs = system - baseline
    ref = sps.bootstrap((diffs,), np.mean, n_resamples=3_000, method="percentile", rng=np.random.default_rng(5))
    for max_values in (1, 7 * n, 10**9):
        dist = bootstrap_means(diffs, n_resamples=3_000, seed=5, max_values=max_values)
        assert np.array_equal(dist, ref.bootstrap_distribution), max_values
    with shared_draws():
        assert np.array_equal(bootstrap_means(diffs, n_resamples=3_000, seed=5), ref.bootstrap_distribution)


@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_intervals_inside_and_outside_a_shared_block_are_the_same_numbers(confidence: float) -> None:
    inputs = [pairs(n, seed) for n in (5, 100, 100, 101) for seed in (1, 2)]
    kw = Resampling(2_000, confidence, 3)
    alone = [paired_bootstrap_ci(s, b, kw) for s, b in inputs] + [mean_ci(list(s), kw) for s, _ in inputs]
    with shared_draws():
        shared = [paired_bootstrap_ci(s, b, kw) for s, b in inputs] + [mean_ci(list(s), kw) for s, _ in inputs]
        again = [paired_bootstrap_ci(s, b, kw) for s, b in inputs]
    assert shared == alone and again == alone[: len(inputs)]
    for (s, b), (_, low, high) in zip(inputs, alone):
        ref = sps.bootstrap(
            (s - b,),
            np.mean,
            n_resamples=2_000,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(3),
        )
        assert (low, high) == (ref.confidence_interval.low, ref.confidence_interval.high)


def test_a_shared_block_draws_once_per_n_and_forgets_when_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real, data = np.random.default_rng, pairs(100, 4)

    def counting(seed: int) -> np.random.Generator:
        calls.append(seed)
        return real(seed)

    monkeypatch.setattr(bootstrap_module.np.random, "default_rng", counting)
    with shared_draws():
        first = next(resample_indices(100, 1_000, 0))
        second = next(resample_indices(100, 1_000, 0))
        other_n = next(resample_indices(99, 1_000, 0))
        assert first is second and not first.flags.writeable and other_n.shape == (1_000, 99)
        for _ in range(3):
            paired_bootstrap_ci(*data, Resampling(1_000, seed=0))
    assert calls == [0, 0]  # n=100 once, n=99 once; the intervals reused the first draw
    after = next(resample_indices(100, 1_000, 0))
    assert after is not first and np.array_equal(after, first) and after.flags.writeable
    assert calls == [0, 0, 0]


def test_several_batches_are_never_kept() -> None:
    with shared_draws():
        batches = list(resample_indices(100, 1_000, 0, max_values=30_000))  # 300 resamples per batch
        assert [b.shape[0] for b in batches] == [300, 300, 300, 100]
        assert list(resample_indices(100, 1_000, 0, max_values=30_000))[0] is not batches[0]
    assert np.array_equal(np.concatenate(batches), np.random.default_rng(0).integers(0, 100, (1_000, 100)))


@pytest.mark.parametrize("seed", range(6))
def test_the_unclustered_p_value_is_the_singleton_cluster_bootstraps(seed: int) -> None:
    """Table 3's p-value now reads the CI's distribution; it equals the singleton cluster bootstrap's."""
    system, baseline = pairs(40, seed)
    if seed == 0:
        system = baseline.copy()
        system[:3] += (-0.0, 1.0, -1.0)  # mostly zero differences (and a negative zero)
    diffs = system - baseline
    before = bootstrap_p_value(cluster_mean_distribution(diffs, np.arange(diffs.size), n_resamples=2_000, seed=seed))
    for shared in (False, True):
        if shared:
            with shared_draws():
                c = paired_comparison(system, baseline, resampling=Resampling(n_resamples=2_000, seed=seed))
        else:
            c = paired_comparison(system, baseline, resampling=Resampling(n_resamples=2_000, seed=seed))
        assert c.p_value == before
    clustered = cluster_bootstrap_ci(
        system, baseline, [f"i{i}" for i in range(diffs.size)], Resampling(n_resamples=2_000, seed=seed)
    )
    assert clustered.p_value == before  # the clustered path, with singleton clusters, agrees too
