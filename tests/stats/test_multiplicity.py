"""Holm's adjustment and the sign-flip permutation test, against hand-computed values and enumeration."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from cts.stats.compare import paired_comparison
from cts.stats.multiplicity import holm, sign_flip_p_value


def test_holm_textbook_example() -> None:
    # m = 4; sorted p: 0.005, 0.01, 0.03, 0.04
    #   4 * 0.005 = 0.02
    #   3 * 0.01  = 0.03  (max with 0.02: 0.03)
    #   2 * 0.03  = 0.06  (max with 0.03: 0.06)
    #   1 * 0.04  = 0.04  (max with 0.06: 0.06: step-down keeps the order)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_keeps_nans_out_of_the_family() -> None:
    # finite m = 3; sorted: 0.02, 0.4, 0.6 -> 3 * 0.02 = 0.06; 2 * 0.4 = 0.8; 1 * 0.6 = 0.6 -> max 0.8
    got = holm([0.6, float("nan"), 0.02, 0.4])
    assert got[0] == pytest.approx(0.8) and math.isnan(got[1])
    assert got[2:] == pytest.approx([0.06, 0.8])
    # 5 * 0.3 = 1.5 -> capped at 1 for every p
    assert holm([0.3] * 5) == pytest.approx([1.0] * 5)
    assert holm([]) == [] and holm([0.2]) == pytest.approx([0.2])


def test_holm_ties_share_their_adjusted_value() -> None:
    # sorted: 0.01, 0.01, 0.02 -> 3 * 0.01 = 0.03; 2 * 0.01 = 0.02 -> 0.03; 1 * 0.02 = 0.02 -> 0.03
    assert holm([0.02, 0.01, 0.01]) == pytest.approx([0.03, 0.03, 0.03])


def enumerated_p(diffs: list[float], labels: list[str] | None = None) -> float:
    """Exact two-sided sign-flip p-value by listing every sign vector (of pairs or of whole clusters)."""
    groups = list(dict.fromkeys(labels)) if labels else list(range(len(diffs)))
    sums = [sum(d for d, lab in zip(diffs, labels) if lab == g) for g in groups] if labels else diffs
    observed = abs(sum(sums))
    flips = [abs(sum(s * x for s, x in zip(signs, sums))) for signs in itertools.product((1, -1), repeat=len(sums))]
    return sum(f >= observed - 1e-9 for f in flips) / len(flips)


def test_sign_flip_by_hand() -> None:
    # d = (1, 2, 3): the 8 sums ±1 ±2 ±3 are 6, 4, 2, 0, 0, -2, -4, -6; |sum| >= 6 twice -> 2 / 8
    assert sign_flip_p_value([1.0, 2.0, 3.0]) == pytest.approx(0.25)
    assert enumerated_p([1.0, 2.0, 3.0]) == pytest.approx(0.25)


def test_sign_flip_matches_exact_enumeration() -> None:
    rng = np.random.default_rng(9)
    diffs = [float(x) for x in rng.normal(0.4, 1.0, 10)]
    exact = enumerated_p(diffs)
    assert sign_flip_p_value(diffs, n_resamples=1024) == pytest.approx(exact, abs=1e-12)  # 2**10 <= 1024: exact
    assert sign_flip_p_value(diffs, n_resamples=1024, max_values=37) == pytest.approx(exact, abs=1e-12)
    sampled = sign_flip_p_value(diffs, n_resamples=1000, seed=4)  # 2**10 > 1000: random sign vectors
    assert sampled == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 1000) + 1e-3)


def test_clustered_sign_flip_flips_whole_clusters() -> None:
    diffs = [2.0, 1.0, -0.5, 3.0, 0.5, 1.5]
    labels = ["a", "a", "b", "c", "c", "d"]
    # cluster sums: a = 3, b = -0.5, c = 3.5, d = 1.5, total 7.5. Of the 16 sign vectors, |sum| >= 7.5 for
    # all + (7.5), b flipped (8.5) and their negations: 4 / 16. Pair by pair it would be 2**6 vectors.
    assert sign_flip_p_value(diffs, labels) == pytest.approx(4 / 16)
    assert sign_flip_p_value(diffs, labels) == pytest.approx(enumerated_p(diffs, labels))
    assert math.isnan(sign_flip_p_value([]))


def test_permutation_p_value_in_a_comparison() -> None:
    scores, baseline = [5.0, 7.0, 9.0], [4.0, 5.0, 6.0]  # diffs 1, 2, 3 -> 0.25 as above
    c = paired_comparison(scores, baseline, p_value="permutation")
    assert c.p_value == pytest.approx(0.25) and c.mean == pytest.approx(2.0)
