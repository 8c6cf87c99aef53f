"""The batched bootstrap: flat memory, and the same numbers as one unbatched draw."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from scipy import stats as sps

from cts.stats import Resampling
from cts.stats.bootstrap import bootstrap_batch, paired_bootstrap_ci


def scores(n: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0, 100, n)
    return base + rng.normal(3, 10, n), base


@pytest.mark.parametrize("n", [7, 200, 2001])
def test_batched_interval_equals_the_unbatched_scipy_draw(n: int) -> None:
    system, baseline = scores(n)
    ref = sps.bootstrap(
        (system - baseline,),
        np.mean,
        n_resamples=2_000,
        method="percentile",
        confidence_level=0.95,
        rng=np.random.default_rng(4),
    ).confidence_interval
    for max_values in (1, 3 * n, 999 * n, 10**9):  # 1 resample per batch ... all at once; odd batch sizes too
        mean, low, high = paired_bootstrap_ci(system, baseline, Resampling(2_000, seed=4), max_values=max_values)
        assert (low, high) == (ref.low, ref.high), max_values
        assert mean == pytest.approx(float(np.mean(system - baseline)))


def test_batch_size_keeps_resampled_values_under_the_bound() -> None:
    assert bootstrap_batch(2_000, 10_000, max_values=1 << 20) == 524
    assert bootstrap_batch(10**7, 10_000, max_values=1 << 20) == 1  # never zero
    assert bootstrap_batch(10, 10_000, max_values=1 << 20) == 10_000  # never more than asked


def test_peak_memory_is_flat_in_n() -> None:
    """Unbatched, 10,000 resamples of 5,000 pairs hold 800 MB of values and indices at once."""
    system, baseline = scores(5_000)
    tracemalloc.start()
    try:
        paired_bootstrap_ci(system, baseline, Resampling(10_000, seed=0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak


@pytest.mark.parametrize("seed", range(4))
def test_linear_quantiles_are_scipys_bit_for_bit(seed: int) -> None:
    from cts.stats.bootstrap import linear_quantiles

    rng = np.random.default_rng(seed)
    for case in range(300):
        values = rng.normal(size=int(rng.integers(1, 3000))) * rng.choice([1e-3, 1.0, 100.0])
        if case % 3 == 0:
            values = np.round(values, 1)  # ties, as scores on a 0-100 scale give
        for confidence in (0.0, 0.5, 0.9, 0.95, 0.99, 1.0):
            alpha = np.asarray((1.0 - confidence) / 2.0, dtype=float)
            p = np.stack((alpha, 1 - alpha), axis=-1)
            assert np.array_equal(linear_quantiles(values, p), sps.quantile(values, p, axis=-1))
    p = np.array([0.025, 0.975])
    assert np.isnan(linear_quantiles(np.array([1.0, np.nan]), p)).all()
    assert np.isnan(linear_quantiles(np.array([]), p)).all()
