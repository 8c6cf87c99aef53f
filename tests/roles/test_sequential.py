"""Sequential clarification: turn order, early stop, closed-book inputs, LLM variant over HTTP."""

from __future__ import annotations

import asyncio
import json

import pytest

from cts.compose.services import Services
from cts.core.contracts import SequentialClarifier
from cts.core.records import read_records
from cts.core.types import QA, UNKNOWN
from cts.protocol.metrics import questions_asked_mean, summarize
from cts.protocol.pipeline import Roles, clarify, clarify_mode, run_instances
from cts.protocol.settings import InstanceSettings, JobSettings
from cts.roles.lexical import LexicalJudge
from cts.roles.llm import InvalidOutput, LLMClarifier, parse_turn
from cts.roles.rules import RuleClarifier, RuleRewriter, RuleUserAnswerer
from cts.stats import Resampling
from tests.handwritten import INSTANCES
from tests.helpers import TableSearch, Typer, built, gold_for, mercury
from tests.llm_server import ScriptedServer, llm_settings


class SpyClarifier:
    """Records what each turn of a sequential clarifier was shown."""

    def __init__(self, inner: RuleClarifier) -> None:
        self.inner, self.mode, self.seen = inner, inner.mode, []

    async def ask(self, blurred_query, k):
        return await self.inner.ask(blurred_query, k)

    async def next_question(self, blurred_query, qa, k):
        self.seen.append((blurred_query, tuple(qa)))
        return await self.inner.next_question(blurred_query, qa, k)


def roles(services, clarifier, table=None):
    return Roles(
        clarifier=clarifier,
        ua=built(RuleUserAnswerer, services),
        rewriter=RuleRewriter(),
        search=TableSearch(table or {}),
        judge=LexicalJudge(),
        qtyper=Typer(),
    )


def test_rule_sequential_moves_on_after_unknown_and_stops_after_a_known_answer():
    c = RuleClarifier(order=["region", "time", "scope"], mode="sequential", stop_early=True)
    first = asyncio.run(c.next_question("Jaguar", (), 3))
    second = asyncio.run(c.next_question("Jaguar", (QA(first, UNKNOWN),), 3))
    assert "region" in first and "time period" in second
    assert asyncio.run(c.next_question("Jaguar", (QA(first, UNKNOWN), QA(second, "1960s")), 3)) is None
    no_stop = RuleClarifier(order=["region", "time", "scope"], mode="sequential")
    third = asyncio.run(no_stop.next_question("Jaguar", (QA(first, UNKNOWN), QA(second, "1960s")), 3))
    assert "Which “Jaguar” do you mean" in third
    assert asyncio.run(no_stop.next_question("Jaguar", (QA(first, "x"), QA(second, "y"), QA(third, "z")), 3)) is None


def test_rule_sequential_skips_a_dimension_an_earlier_answer_filled():
    c = RuleClarifier(order=["scope", "time", "region"], mode="sequential")
    scope_q = asyncio.run(c.next_question("长城的历史", (), 3))
    nxt = asyncio.run(c.next_question("长城的历史", (QA(scope_q, "明朝的长城"),), 3))
    assert "地区" in nxt  # the answer named a dynasty, so the time question is skipped


def test_sequential_turns_see_q_and_earlier_pairs_only_and_records_keep_order(services, tmp_path):
    spy = SpyClarifier(RuleClarifier(order=["region", "time", "scope"], mode="sequential", stop_early=True))
    assert isinstance(spy, SequentialClarifier) and clarify_mode(spy) == "sequential"
    golds = {i.id: gold_for(i.id, (i.fused_query, 2)) for i in INSTANCES}
    records, _ = asyncio.run(
        run_instances(
            list(INSTANCES), golds, roles(services, spy), InstanceSettings(3), JobSettings(tmp_path, progress=False)
        )
    )
    intents = {i.fused_query for i in INSTANCES if i.fused_query != i.blurred_query}
    for blurred, qa in spy.seen:
        assert blurred in {i.blurred_query for i in INSTANCES}
        assert not any(intent in p.question for p in qa for intent in intents)
    stored = {r.id: r for r in read_records(tmp_path / "records.jsonl")}
    for r in records:
        assert stored[r.id].mode == "sequential" and stored[r.id].questions == r.questions
        assert len(r.questions) == len(r.answers) <= 3
        known = [a != UNKNOWN for a in r.answers]
        assert not any(known[:-1])  # it stopped at the first known answer
    jag = stored["h1"]  # region unknown, then time 1960s: stop after turn 2
    assert len(jag.questions) == 2 and jag.answers == (UNKNOWN, "1960s")
    assert 1 <= questions_asked_mean(records) < 3
    assert summarize(records, k=3, resampling=Resampling(200))["questions_asked_mean"] == questions_asked_mean(records)


def test_batch_mode_is_unchanged(services):
    inst, _, _ = mercury()
    batch = asyncio.run(clarify(inst, 2, roles(services, RuleClarifier(order=["scope", "time"]))))
    assert len(batch.questions) == 2 and len(batch.qa) == 2


def test_parse_turn():
    assert parse_turn('{"question": "Which year?"}', [], False) == "Which year?"
    assert parse_turn('{"stop": true}', [], True) is None
    with pytest.raises(InvalidOutput, match="not allowed"):
        parse_turn('{"stop": true}', [], False)
    with pytest.raises(InvalidOutput, match="already asked"):
        parse_turn('{"question": "which year?"}', ["Which  year?"], False)


def test_llm_sequential_clarifier_over_http(llm_server: ScriptedServer, tmp_path):
    replies = iter(['{"question": "哪一年？"}', '{"stop": true}'])

    def handler(body):
        user = body["messages"][-1]["content"]
        if "Earlier turns" in user:
            return next(replies)
        return "2023年" if "Clarification question:" in user else "苹果发布会 2023年"

    llm_server.handler = handler
    services = Services(cache_dir=tmp_path, settings={"llm": llm_settings(llm_server)})
    spec = {"name": "m", "id": "openai/m"}
    clarifier = built(LLMClarifier, services, model=spec, prompt="clarifier", mode="sequential", stop_early=True)
    from cts.roles.llm import LLMRewriter, LLMUserAnswerer

    rs = Roles(
        clarifier=clarifier,
        ua=built(LLMUserAnswerer, services, model=spec, prompt="ua"),
        rewriter=built(LLMRewriter, services, model=spec, prompt="rewriter"),
        search=TableSearch({}),
        judge=LexicalJudge(),
        qtyper=Typer(),
    )
    inter = asyncio.run(clarify(INSTANCES[3], 3, rs))
    assert inter.questions == ["哪一年？"] and [p.answer for p in inter.qa] == ["2023年"]
    turns = [r.body for r in llm_server.requests if "Earlier turns" in r.body["messages"][-1]["content"]]
    assert len(turns) == 2
    assert "Q1: 哪一年？\nA1: 2023年" in turns[1]["messages"][-1]["content"]
    for body in turns:
        assert INSTANCES[3].fused_query not in json.dumps(body, ensure_ascii=False)
