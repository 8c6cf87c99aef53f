"""Weighted kappa and ordinal Krippendorff's alpha with cluster bootstrap CIs, against independent implementations.

Kappa is checked against scikit-learn's ``cohen_kappa_score``; alpha against the textbook
coincidence-matrix formula (``tests/agreement_checks.py``); the intervals against a loop that
draws the same clusters.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from cts.core.scoring import majority_label
from cts.stats.agreement import (
    alpha_ci,
    cluster_draws,
    confusion_counts,
    kappa_ci,
    krippendorff_alpha,
    weighted_kappa,
)
from cts.stats.bootstrap import Resampling
from tests.agreement_checks import textbook_ordinal_alpha


def sample(seed: int, n_units: int = 120, n_raters: int = 4) -> tuple[np.ndarray, list[str]]:
    """Raters who follow a latent label with noise; 6 units per cluster; some labels missing."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 3, n_units)
    data = np.clip(truth + rng.choice([-1, 0, 0, 0, 1], (n_raters, n_units)), 0, 2).astype(float)
    data[rng.random(data.shape) < 0.1] = np.nan
    return data, [f"i{u // 6}" for u in range(n_units)]


@pytest.mark.parametrize("weights", ["linear", "quadratic"])
def test_weighted_kappa_is_sklearns(weights: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 3, 200)
    b = np.clip(a + rng.choice([-1, 0, 1], 200), 0, 2)
    want = cohen_kappa_score(a, b, weights=weights, labels=[0, 1, 2])
    assert weighted_kappa(list(a), list(b), weights) == pytest.approx(want, abs=1e-12)  # type: ignore[arg-type]


def test_confusion_counts_count_each_pair() -> None:
    counts = confusion_counts([2, 2, 1, 0, 0], [2, 1, 1, 0, 2])
    assert counts.tolist() == [[1, 0, 1], [0, 1, 0], [0, 1, 1]]


def test_alpha_is_the_textbook_formula() -> None:
    for seed in range(5):
        data, _ = sample(seed)
        assert krippendorff_alpha(data) == pytest.approx(textbook_ordinal_alpha(data), abs=1e-9)


def test_alpha_of_perfect_agreement_is_one_and_undefined_without_variation() -> None:
    assert krippendorff_alpha(np.array([[0, 1, 2, 2], [0, 1, 2, 2]], dtype=float)) == pytest.approx(1.0)
    assert np.isnan(krippendorff_alpha(np.array([[2, 2, 2], [2, 2, 2]], dtype=float)))


def test_kappa_ci_resamples_whole_clusters() -> None:
    data, clusters = sample(7)
    a, b = data[0], data[1]
    keep = ~np.isnan(a) & ~np.isnan(b)
    xa, xb = a[keep].astype(int), b[keep].astype(int)
    kept = [c for c, k in zip(clusters, keep) if k]
    got = kappa_ci(list(xa), list(xb), kept, Resampling(n_resamples=400, confidence=0.9, seed=5))
    order = list(dict.fromkeys(kept))
    members = {c: [i for i, x in enumerate(kept) if x == c] for c in order}
    rng = np.random.default_rng(5)
    values = []
    for _ in range(400):
        rows = [i for _ in order for i in members[order[int(rng.integers(0, len(order)))]]]
        values.append(cohen_kappa_score(xa[rows], xb[rows], weights="linear", labels=[0, 1, 2]))
    low, high = np.quantile(values, [0.05, 0.95])
    assert got.value == pytest.approx(cohen_kappa_score(xa, xb, weights="linear", labels=[0, 1, 2]))
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-9)
    assert got.n == len(xa) and got.n_clusters == len(order)


def test_alpha_ci_resamples_whole_clusters() -> None:
    data, clusters = sample(11, n_units=60)
    got = alpha_ci(data, clusters, Resampling(n_resamples=150, confidence=0.95, seed=2))
    order = list(dict.fromkeys(clusters))
    members = {c: [i for i, x in enumerate(clusters) if x == c] for c in order}
    rng = np.random.default_rng(2)
    values = []
    for _ in range(150):
        cols = [i for _ in order for i in members[order[int(rng.integers(0, len(order)))]]]
        values.append(textbook_ordinal_alpha(data[:, cols]))
    low, high = np.quantile(values, [0.025, 0.975])
    assert got.value == pytest.approx(textbook_ordinal_alpha(data), abs=1e-9)
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-9)


def test_draws_do_not_depend_on_the_batch_size() -> None:
    one = np.concatenate(list(cluster_draws(7, 50, seed=1)))
    small = np.concatenate(list(cluster_draws(7, 50, seed=1, max_values=8)))
    assert one.shape == (50, 7) and (one == small).all()


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        (["full", "full", "none"], "full"),
        (["full", "partial", "none"], "none"),  # a three-way tie: the lowest
        (["full", "partial"], "partial"),
        (["partial", "full", "full", "partial", "none"], "partial"),
        (["none"], "none"),
    ],
)
def test_majority_label_breaks_ties_downwards(labels: list[str], want: str) -> None:
    assert majority_label(labels) == want  # type: ignore[arg-type]
