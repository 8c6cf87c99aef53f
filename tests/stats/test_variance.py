"""Variance components: recovered from synthetic scores whose components are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cts.stats.variance import mean_within_sd, one_way, stage_shares

STAGE_SD = {"clarifier": 6.0, "ua": 3.0, "rewriter": 4.0, "search": 8.0, "judge": 2.0}
INSTANCE_SD = 10.0
N_INSTANCES, N_REPEATS = 1000, 6
TOLERANCE = 0.15
"""Relative tolerance on a recovered variance: about three sampling SEs of the between part
(~5% with 1000 instances), ten of the within part's (~1.5%)."""


def synthetic(varied: str | None, seed: int) -> list[list[float]]:
    """Scores ``mu + a_i + sum_s e_s``: the varied stage draws anew per repeat, the others once per instance.

    ``varied=None`` re-samples every stage (plain repeats).
    """
    rng = np.random.default_rng(seed)
    scores = rng.normal(50.0, INSTANCE_SD, (N_INSTANCES, 1)) + np.zeros((1, N_REPEATS))
    for stage, sd in STAGE_SD.items():
        per_repeat = varied is None or varied == stage
        scores = scores + rng.normal(0.0, sd, (N_INSTANCES, N_REPEATS if per_repeat else 1))
    return scores.tolist()


def test_one_way_recovers_between_and_within_variance():
    groups = synthetic(None, seed=1)
    c = one_way(groups)
    within = sum(sd**2 for sd in STAGE_SD.values())
    assert c.within == pytest.approx(within, rel=TOLERANCE)
    assert c.between == pytest.approx(INSTANCE_SD**2, rel=TOLERANCE)
    assert c.icc == pytest.approx(INSTANCE_SD**2 / (INSTANCE_SD**2 + within), abs=0.05)
    assert mean_within_sd(groups) == pytest.approx(math.sqrt(within), rel=TOLERANCE)


def test_one_way_matches_the_balanced_closed_form_and_unbalanced_groups_are_weighted():
    """Independent check: balanced, between = var(means) - within / n (another route to the same number)."""
    rng = np.random.default_rng(2)
    groups = [list(rng.normal(m, 2.0, 5)) for m in rng.normal(0.0, 3.0, 30)]
    c = one_way(groups)
    within = float(np.mean([np.var(g, ddof=1) for g in groups]))
    means = [np.mean(g) for g in groups]
    assert c.within == pytest.approx(within, rel=1e-12)
    assert c.between == pytest.approx(max(0.0, float(np.var(means, ddof=1)) - within / 5), rel=1e-12)
    # ICC(1) of Shrout and Fleiss (1979), from the mean squares: (MSB - MSW) / (MSB + (n - 1) MSW).
    msb = 5 * float(np.var(means, ddof=1))
    assert c.icc == pytest.approx((msb - within) / (msb + 4 * within), rel=1e-12)
    # Unbalanced: a group of one adds to the between part only; every group of 2+ to the within.
    c2 = one_way([*groups, [100.0]])
    assert c2.within == pytest.approx(within, rel=1e-12) and c2.between > c.between


def test_degenerate_groups_give_nan_or_zero_not_a_number_made_up():
    assert math.isnan(one_way([[1.0, 2.0]]).within)  # one instance: no between part
    assert math.isnan(one_way([[1.0], [2.0]]).within)  # no repeat: no within part
    c = one_way([[3.0, 3.0], [5.0, 5.0]])  # deterministic roles: every repeat the same
    assert c.within == 0.0 and c.icc == 1.0
    assert math.isnan(one_way([[4.0, 4.0], [4.0, 4.0]]).icc)  # no variance at all
    assert math.isnan(mean_within_sd([[1.0], [2.0]]))


def test_stage_shares_recover_each_stage_s_variance_and_share():
    by_stage = {s: synthetic(s, seed=10 + n) for n, s in enumerate(STAGE_SD)}
    shares, total, remainder = stage_shares(by_stage)
    want_total = INSTANCE_SD**2 + sum(sd**2 for sd in STAGE_SD.values())
    assert total == pytest.approx(want_total, rel=TOLERANCE / 2)  # pooled over five jobs
    for share in shares:
        sd = STAGE_SD[share.stage]
        assert share.variance == pytest.approx(sd**2, rel=TOLERANCE), share
        assert share.share == pytest.approx(sd**2 / want_total, abs=0.03), share
    assert remainder == pytest.approx(INSTANCE_SD**2 / want_total, abs=0.08)
    assert [s.stage for s in shares] == list(STAGE_SD)


def test_stage_shares_would_fail_on_plain_repeats():
    """The test above can fail: with every stage re-sampled, each 'stage' gets the whole within variance."""
    shares, _, _ = stage_shares({s: synthetic(None, seed=20) for s in ("clarifier", "judge")})
    assert shares[1].variance != pytest.approx(STAGE_SD["judge"] ** 2, rel=TOLERANCE)
