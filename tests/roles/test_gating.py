"""Ask-or-not gates: decisions from q only, post-hoc scoring, oracle bound, CLI counters over HTTP."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from cts.compose.services import Services
from cts.core.contracts import Decision
from cts.core.records import ArmResult, Record
from cts.report.gate_evaluation import decide_all, evaluate_gate, gate_result
from cts.roles.gates import AlwaysGate, LLMGate, NeverGate, OracleGate, RuleGate, parse_decision
from cts.roles.llm import InvalidOutput
from cts.stats import Resampling
from tests.handwritten import INSTANCES, TITLES
from tests.helpers import built
from tests.llm_server import ScriptedServer, llm_settings


def rec(i: str, query: str, clarified: float | None, orig: float | None, n_q: int = 2) -> Record:
    return Record(
        id=i,
        k=n_q,
        questions=tuple(f"q{j}" for j in range(n_q)),
        answers=("a",) * n_q,
        clarified=ArmResult(query=f"{query} +", score=clarified),
        orig=ArmResult(query=query, score=orig),
    )


RECORDS = [
    rec("a", "Jaguar", 80, 20),
    rec("b", "苹果发布会", 10, 50),
    rec("c", "长城的历史", 60, 60),
    rec("d", INSTANCES[7].blurred_query, 90, 40),
    rec("e", "x", None, 30),
]


def test_rule_gate_on_handwritten_queries():
    gate = RuleGate(titles=TITLES, max_tokens=3, min_titles=2)
    decide = {i.id: asyncio.run(gate.decide(i.blurred_query)).ask for i in INSTANCES}
    assert gate.title_matches("Jaguar") == 3 and gate.title_matches("苹果发布会") == 0
    assert gate.title_matches("Python release schedule") == 0  # head "Python release schedule"
    assert decide["h1"] and decide["h4"] and decide["h5"]  # short / ambiguous heads, Chinese included
    assert not decide["h7"] and not decide["h8"]  # long, specific queries are searched directly


def test_gated_score_oracle_bound_and_precision_recall():
    results = {}
    for name, gate in (
        ("always", AlwaysGate()),
        ("never", NeverGate()),
        ("oracle", OracleGate()),
        ("rules", RuleGate(titles=TITLES)),
    ):
        results[name], decisions = evaluate_gate(RECORDS, gate, Resampling(500))
        assert "e" not in decisions  # unscored arm: not gateable
    a, n, o, r = results["always"], results["never"], results["oracle"], results["rules"]
    assert a.score_mean == pytest.approx((80 + 10 + 60 + 90) / 4) and n.score_mean == pytest.approx(170 / 4)
    assert o.score_mean == pytest.approx((80 + 50 + 60 + 90) / 4)
    assert o.score_mean >= max(a.score_mean, n.score_mean)
    assert n.score_mean <= r.score_mean <= o.score_mean
    assert o.precision == o.recall == 1.0 and o.ask_rate == 0.5
    assert a.precision == pytest.approx(2 / 4) and a.recall == 1.0
    assert n.recall == 0.0 and math.isnan(n.precision)
    assert a.delta_vs_always == 0.0 and o.delta_vs_orig == pytest.approx((60 + 0 + 0 + 50) / 4)
    assert a.questions_per_instance == 2.0 and o.questions_per_instance == 1.0


def test_query_gates_see_the_blurred_query_only():
    seen = []

    class Spy:
        async def decide(self, blurred_query: str) -> Decision:
            seen.append(blurred_query)
            return Decision(True)

    asyncio.run(decide_all(RECORDS[:4], Spy()))
    assert sorted(seen) == sorted(r.orig.query for r in RECORDS[:4])


def test_parse_decision():
    assert parse_decision('{"ask": true, "confidence": 0.8}') == Decision(True, 0.8)
    assert parse_decision('{"ask": "no"}') == Decision(False, 1.0)
    for bad in ('{"confidence": 1}', '{"ask": "maybe"}', '{"ask": true, "confidence": 3}'):
        with pytest.raises(InvalidOutput):
            parse_decision(bad)


def test_llm_gate_over_http_sees_q_only(llm_server: ScriptedServer, tmp_path):
    def handler(body):
        user = body["messages"][-1]["content"]
        return json.dumps({"ask": len(user) < 60, "confidence": 0.9})

    llm_server.handler = handler
    services = Services(cache_dir=tmp_path, settings={"llm": llm_settings(llm_server)})
    gate = built(LLMGate, services, model={"name": "m", "id": "openai/m"}, prompt="gate")
    with services.usage_scope() as usage:
        result, decisions = evaluate_gate(RECORDS, gate, Resampling(200))
    assert len(llm_server.requests) == 4 == usage["gate"]["calls"] and set(usage) == {"gate"}
    assert decisions["a"].ask and not decisions["d"].ask
    bodies = json.dumps([r.body for r in llm_server.requests], ensure_ascii=False)
    assert "+" not in bodies.replace("2 +", "")  # the clarified arm's query is never shown
    assert 0 < result.ask_rate < 1


def test_gate_result_with_no_gateable_record():
    assert math.isnan(gate_result([], {}).score_mean)


def test_evaluate_gate_inside_a_running_event_loop():
    """A notebook kernel runs an event loop: the report's gating must still work there."""

    async def inside():
        return evaluate_gate(RECORDS, AlwaysGate(), Resampling(100))[0]

    assert asyncio.run(inside()).ask_rate == 1.0


def test_the_indexed_title_count_is_the_full_scans_on_the_corpus(services):
    """RuleGate counts over the titles holding the head's first word; a regex over every title agrees."""
    import re

    from cts.roles.rules import head_term
    from cts.text.tokens import normalize

    gate = RuleGate(corpus=services.corpus)
    titles = gate.titles()
    queries = [d.title for d in services.corpus.docs[:300:7]]
    queries += ["Tell me about Mercury", "new york", "C++", "(film)", "Saint-Étienne", "介绍一下长城", "a", ""]
    for q in queries:
        head = normalize(head_term(q))
        pattern = re.compile(rf"(?<!\w){re.escape(head)}(?!\w)")
        full = (
            sum(head in t for t in titles)
            if re.search(r"[\u3400-\u9fff]", head)
            else sum(bool(pattern.search(t)) for t in titles)
        )
        assert gate.title_matches(q) == (full if head else 0), q
