import math

import numpy as np

from cts.core.records import ArmResult, ErrorInfo, Record
from cts.protocol.metrics import interaction_metrics, score_metrics, usage_metrics
from cts.stats import Resampling


def rec(i, score, orig, answers=(), error=None, usage=None):
    return Record(
        id=str(i),
        k=len(answers) or 1,
        questions=tuple(f"q{j}" for j in range(len(answers))),
        answers=tuple(answers),
        clarified=ArmResult("q", score=score),
        orig=ArmResult("q", score=orig),
        error=error,
        usage=usage or {},
    )


def test_score_metrics_exclude_unscored_and_pair_with_orig():
    records = [
        rec(0, 50.0, 40.0),
        rec(1, 70.0, 40.0),
        rec(2, None, 10.0, error=ErrorInfo("judge", "invalid_output", "x")),
        rec(3, 30.0, 40.0),
        rec(4, 90.0, None),
    ]
    m = score_metrics(records, Resampling(2000, 0.95, seed=1))
    assert m["n_instances"] == 5 and m["n_unscored"] == 1 and m["n_errors"] == 1 and m["n_paired"] == 3
    assert m["score_mean"] == np.mean([50, 70, 30, 90]) and m["score_min"] == 30 and m["score_max"] == 90
    assert m["score_p50"] == 60.0 and math.isclose(m["score_p90"], np.percentile([50, 70, 30, 90], 90))
    assert m["orig_score_mean"] == 32.5
    assert math.isclose(m["delta_mean"], (10 + 30 - 10) / 3)
    assert m["delta_ci_low"] <= m["delta_mean"] <= m["delta_ci_high"]


def test_bootstrap_ci_is_seeded_and_excludes_zero_for_a_clear_gain():
    rng = np.random.default_rng(3)
    orig = rng.uniform(0, 50, 200)
    records = [rec(i, o + 5 + rng.normal(0, 3), o) for i, o in enumerate(orig)]
    a = score_metrics(records, Resampling(10_000, 0.95, seed=0))
    b = score_metrics(records, Resampling(10_000, 0.95, seed=0))
    assert a == b and 4 < a["delta_ci_low"] < a["delta_mean"] < a["delta_ci_high"] < 6


def test_no_scores_gives_nan_not_zero():
    m = score_metrics([rec(0, None, None)], Resampling(100, 0.95, seed=0))
    assert math.isnan(m["score_mean"]) and math.isnan(m["delta_mean"]) and m["n_unscored"] == 1


def test_interaction_metrics_unknown_rates_and_known_counts():
    records = [
        rec(0, 1, 1, ("unknown", "unknown")),
        rec(1, 1, 1, ("a", "unknown")),
        rec(2, 1, 1, ("a", "b")),
        rec(3, 1, 1, ("unknown", "b")),
    ]
    m = interaction_metrics(records, k=2)
    assert m["ua_unknown_rate"] == 4 / 8 and m["all_unknown_rate"] == 0.25
    assert (m["known_cnt_0"], m["known_cnt_1"], m["known_cnt_2"], m["known_cnt_3"]) == (0.25, 0.5, 0.25, 0.0)


def test_orig_interaction_has_no_signal_and_no_unknown_rate():
    m = interaction_metrics([rec(0, 1, 1), rec(1, 1, 1)], k=1)
    assert math.isnan(m["ua_unknown_rate"]) and math.isnan(m["all_unknown_rate"]) and math.isnan(m["known_cnt_0"])


def test_an_instance_without_questions_in_an_asking_job_counts_as_all_unknown():
    m = interaction_metrics([rec(0, 1, 1), rec(1, 1, 1, ("a",))], k=1)
    assert m["all_unknown_rate"] == 0.5 and m["known_cnt_0"] == 0.5 and m["ua_unknown_rate"] == 0.0


def test_interactions_that_failed_before_search_are_excluded():
    failed = Record(id="x", k=1, questions=("q",), error=ErrorInfo("answer", "api_error", "500"))
    m = interaction_metrics([failed, rec(1, 1, 1, ("a",))], k=1)
    assert m["ua_unknown_rate"] == 0.0 and m["known_cnt_1"] == 1.0


def test_usage_metrics_sum_per_role_and_job():
    u1 = {
        "clarifier": {"calls": 1, "cache_hits": 0, "tokens_in": 100, "tokens_out": 10, "cost_usd": 0.01},
        "judge": {"calls": 2, "cache_hits": 1, "tokens_in": 300, "tokens_out": 20, "cost_usd": 0.02},
    }
    m = usage_metrics([rec(0, 1, 1, usage=u1), rec(1, 1, 1, usage=u1)])
    assert m["llm_calls"] == 6 and m["cache_hits"] == 2 and math.isclose(m["cost_usd"], 0.06)
    assert m["tokens_in_judge"] == 600 and math.isclose(m["cost_usd_clarifier"], 0.02)


def test_the_job_s_delta_ci_does_not_depend_on_the_order_of_its_records():
    from cts.protocol.metrics import summarize

    rng = np.random.default_rng(5)
    records = [rec(f"i{i:02d}", float(rng.uniform(0, 100)), float(rng.uniform(0, 100))) for i in range(30)]
    keys = ("delta_mean", "delta_ci_low", "delta_ci_high")
    want = summarize(records, k=1, resampling=Resampling(2000))
    for order in (records[::-1], [records[i] for i in rng.permutation(30)]):
        got = summarize(order, k=1, resampling=Resampling(2000))
        assert [got[k] for k in keys] == [want[k] for k in keys]  # the report reads them in another order
