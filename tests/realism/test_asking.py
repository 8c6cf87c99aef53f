"""Ask-or-not against people's clarification_need: AUC and accuracy known by construction; the reference gates."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cts.core.contracts import Decision
from cts.data.clariq import load_clariq
from cts.realism.asking import Request, auc, auc_estimate, gate_metrics, requests_of, score_requests
from cts.roles.gates import AlwaysGate, NeverGate, OracleGate
from cts.stats import Resampling
from tests.realism.files import write_clariq

BOOT = Resampling(n_resamples=400, seed=0)


def test_auc_known_values():
    assert auc([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 1.0
    assert auc([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == 0.0
    assert auc([0.5] * 4, [True, False, True, False]) == 0.5  # ties count one half
    assert auc([0.9, 0.3, 0.5, 0.1], [True, True, False, False]) == 0.75  # 3 of 4 (pos, neg) pairs ordered
    assert math.isnan(auc([0.1, 0.2], [True, True]))  # one class only


def test_auc_interval_resamples_topics():
    scores, labels = [0.9, 0.3, 0.5, 0.1, 0.8, 0.2], [True, True, False, False, True, False]
    e = auc_estimate(scores, labels, ["a", "a", "b", "b", "c", "c"], BOOT)
    assert e.value == pytest.approx(auc(scores, labels)) and e.n == 6 and e.n_clusters == 3
    assert e.low <= e.value <= e.high


class Scripted:
    """A query gate whose decisions are given per request."""

    def __init__(self, decisions: dict[str, Decision]) -> None:
        self.decisions = decisions

    async def decide(self, blurred_query: str) -> Decision:
        return self.decisions[blurred_query]


REQUESTS = [Request("1", "a", 4), Request("2", "b", 3), Request("3", "c", 1), Request("4", "d", 2)]


def test_gate_metrics_known_by_construction():
    gate = Scripted(
        {"a": Decision(True, 0.9), "b": Decision(False, 0.6), "c": Decision(True, 0.6), "d": Decision(False, 0.8)}
    )
    scored = score_requests(gate, REQUESTS)
    assert [s.score for s in scored] == pytest.approx([0.9, 0.4, 0.6, 0.2])  # confidence of asking
    m = gate_metrics(scored, BOOT)
    assert m["auc"].value == pytest.approx(0.75)  # 0.9 > 0.6, 0.2; 0.4 > 0.2 only
    assert m["accuracy"].value == pytest.approx(0.5)  # a right, b wrong, c wrong, d right
    assert m["ask_rate"].value == m["need_rate"].value == pytest.approx(0.5)


def test_reference_gates():
    never = gate_metrics(score_requests(NeverGate(), REQUESTS), BOOT)
    assert never["auc"].value == 0.5 and never["accuracy"].value == 0.5 and never["ask_rate"].value == 0.0
    always = gate_metrics(score_requests(AlwaysGate(), REQUESTS), BOOT)
    assert always["auc"].value == 0.5 and always["ask_rate"].value == 1.0
    oracle = gate_metrics(score_requests(OracleGate(), REQUESTS), BOOT)  # people's own rating: the ceiling
    assert oracle["auc"].value == 1.0 and oracle["accuracy"].value == 1.0


def test_requests_of_clariq_one_per_wording(tmp_path: Path):
    reqs = requests_of(load_clariq(str(write_clariq(tmp_path / "train.tsv"))))
    assert [(r.topic, r.blurred_query, r.need) for r in reqs] == [
        ("1", "Tell me about glass frogs.", 4),
        ("2", "Tell me about the moon's rocks.", 1),
        ("3", "介绍一下长城", 3),
        ("3", "长城", 3),
    ]
