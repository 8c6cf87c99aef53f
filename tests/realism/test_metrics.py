"""Each realism statistic on pairs whose value is known by construction, with its cluster bootstrap interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cts.realism.metrics import Pair, audit_metrics, confusion, human_distance, kappa_estimate
from cts.stats import Resampling

INTENT = "glass frogs of Costa Rica"
PHOTOS = "pictures of glass frogs"
BOOT = Resampling(n_resamples=500, seed=0)

# (topic, q*, question, person, UA): person/UA informative = 1/1, 0/0, 1/0, 0/1, 1/1, 0/0
PAIRS = [
    Pair("t1", INTENT, "which country", "costa rica", "costa rica"),
    Pair("t2", INTENT, "which country", "i dont know", "unknown"),
    Pair("t3", INTENT, "which country", "panama city", "unknown"),  # the person leaks (panama, city)
    Pair("t4", PHOTOS, "do you want pet shops", "no", "pictures of frogs"),
    Pair("t5", INTENT, "which country", "costa rica frogs", "costa rica"),
    Pair("t6", "长城在北京的旅游路线", "您想了解历史吗？", "不知道", "unknown"),
]


@pytest.fixture(scope="module")
def metrics():
    return audit_metrics(PAIRS, BOOT)


def test_confusion_and_kappa(metrics):
    h = [True, False, True, False, True, False]
    u = [True, False, False, True, True, False]
    assert confusion(h, u).tolist() == [[2.0, 1.0], [1.0, 2.0]]
    assert metrics["kappa"].value == pytest.approx(1 / 3)  # p_o = 4/6, p_e = 1/2
    assert metrics["kappa"].n == 6 and metrics["kappa"].n_clusters == 6
    assert metrics["agreement"].value == pytest.approx(4 / 6)


def test_kappa_edges():
    clusters = ["a", "a", "b", "b"]
    assert kappa_estimate([True, False, True, False], [True, False, True, False], clusters, BOOT).value == 1.0
    assert kappa_estimate([True, False, True, False], [False, True, False, True], clusters, BOOT).value == -1.0
    assert math.isnan(kappa_estimate([True] * 4, [True] * 4, clusters, BOOT).value)  # no chance disagreement


def test_cooperativeness_gap(metrics):
    assert metrics["over_answer"].value == pytest.approx(1 / 6)  # the UA answers, the person did not (t4)
    assert metrics["under_answer"].value == pytest.approx(1 / 6)  # the reverse (t3)
    assert metrics["ua_answer_rate"].value == metrics["human_answer_rate"].value == pytest.approx(0.5)


def test_content_f1_over_pairs_both_answered(metrics):
    assert metrics["content_f1"].value == pytest.approx((1.0 + 0.8) / 2)  # t1 exact, t5 p=1 r=2/3
    assert metrics["content_f1"].n == 2


def test_style_lengths_and_leaks(metrics):
    assert metrics["ua_tokens"].value == pytest.approx(2.0)  # t1, t4, t5: two content tokens each
    assert metrics["human_tokens"].value == pytest.approx(7 / 3)  # t1 2, t3 2, t5 3
    assert metrics["human_leak_rate"].value == pytest.approx(1 / 3)  # t3 only
    assert metrics["ua_leak_rate"].value == 0.0


def test_intervals_hold_the_value(metrics):
    for name, e in metrics.items():
        if e.n > 1 and np.isfinite(e.low):
            assert e.low <= e.value <= e.high, name


def test_human_distance(metrics):
    expected = (0.0 + 1 / 3 + (1 / 3) / (7 / 3)) / 3  # answer rates equal, leak gap 1/3, length gap 1/7
    assert human_distance(metrics) == pytest.approx(expected)
    same = [Pair("t1", INTENT, "which country", "costa rica", "costa rica")] * 3
    assert human_distance(audit_metrics(same, BOOT)) == 0.0
