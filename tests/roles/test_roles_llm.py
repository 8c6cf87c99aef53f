"""LLM roles against the local server: output repair, validation, re-asks, leakage canary, config."""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from cts.compose.app import build_node
from cts.compose.services import Services
from cts.core.types import (
    QA,
    UNKNOWN,
    Evidence,
    GoldDraft,
    Instance,
    Nugget,
    UnscoredError,
)
from cts.llm import ModelSpec
from cts.roles.llm import (
    LLMClarifier,
    LLMExtractor,
    LLMJudge,
    LLMRewriter,
    LLMUserAnswerer,
)
from cts.roles.parse import normalise_answer
from tests.helpers import built
from tests.llm_fakes import protocol_reply
from tests.llm_server import ScriptedServer, llm_settings

CONF = Path(__file__).resolve().parents[2] / "conf"
SPEC = {
    "_target_": "cts.llm.ModelSpec",
    "name": "ernie",
    "id": "openai/ernie-4.5-turbo-128k",
    "params": {"temperature": 0},
}
NUGGETS = (
    Nugget("n1", "Oxford ranks first", 3),
    Nugget("n2", "ETH Zurich is in Switzerland", 2),
    Nugget("n3", "Both offer AI master's", 1),
)


@pytest.fixture
def services(llm_server: ScriptedServer, tmp_path: Path) -> Services:
    return Services(cache_dir=tmp_path, settings={"llm": llm_settings(llm_server, max_reasks=2)})


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_clarifier_parses_questions_and_sends_prompt_a(llm_server: ScriptedServer, services: Services) -> None:
    llm_server.script('["Which year?", "Which country?"]')
    clarifier = built(LLMClarifier, services, model=SPEC, prompt="clarifier")
    assert run(clarifier.ask("best universities for AI", 2)) == ["Which year?", "Which country?"]
    (request,) = llm_server.requests
    roles = [m["role"] for m in request.body["messages"]]
    assert roles == ["system", "user"]
    assert "best universities for AI" in request.body["messages"][1]["content"]
    assert services.llm.usage()["clarifier"]["calls"] == 1


@pytest.mark.parametrize(
    "reply",
    [
        "```json\n['Which year?', 'Which country?',]\n```",
        'Here you go: ["Which year?", "Which country?"',
        '<think>the user wants...</think>{"questions": ["Which year?", "Which country?"]}',
    ],
)
def test_clarifier_repairs_malformed_json_without_reask(
    reply: str, llm_server: ScriptedServer, services: Services
) -> None:
    llm_server.script(reply)
    assert run(built(LLMClarifier, services, model=SPEC, prompt="clarifier").ask("q", 2)) == [
        "Which year?",
        "Which country?",
    ]
    assert len(llm_server.requests) == 1


def test_clarifier_reasks_truncated_json(llm_server: ScriptedServer, services: Services) -> None:
    llm_server.script('["Which year?", "Which reg', '["Which year?", "Which region?"]')
    assert run(built(LLMClarifier, services, model=SPEC, prompt="clarifier").ask("q", 2)) == [
        "Which year?",
        "Which region?",
    ]
    first, second = (r.body["messages"] for r in llm_server.requests)
    assert second[: len(first)] == first
    assert second[len(first)] == {"role": "assistant", "content": '["Which year?", "Which reg'}
    assert "truncated" in second[-1]["content"] and second[-1]["role"] == "user"


@pytest.mark.parametrize("bad", ['["Which year?"]', '["Which year?", "which  YEAR?"]', '["", "Which year?"]'])
def test_clarifier_wrong_questions_reask_then_unscored(
    bad: str, llm_server: ScriptedServer, services: Services
) -> None:
    llm_server.default = bad
    with pytest.raises(UnscoredError) as err:
        run(built(LLMClarifier, services, model=SPEC, prompt="clarifier").ask("q", 2))
    assert len(llm_server.requests) == 3  # first ask + max_reasks=2
    assert err.value.reason.startswith("clarifier:")


def test_wrong_count_then_fixed(llm_server: ScriptedServer, services: Services) -> None:
    llm_server.script('["a?", "b?", "c?"]', '["a?", "b?"]')
    assert run(built(LLMClarifier, services, model=SPEC, prompt="clarifier").ask("q", 2)) == ["a?", "b?"]
    assert "exactly 2" in llm_server.requests[1].body["messages"][-1]["content"]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("unknown", UNKNOWN),
        ("Unknown.", UNKNOWN),
        ('"unknown"', UNKNOWN),
        ("UNKNOWN", UNKNOWN),
        ("未知", UNKNOWN),
        ("未知。", UNKNOWN),
        ("不知道", UNKNOWN),
        ("Not specified.", UNKNOWN),
        ("unknown - the intent does not say", UNKNOWN),
        ("Answer: Europe.", "Europe"),
        ("“2023年”", "2023年"),
        ("Europe\n(stated in the intent)", "Europe"),
        ("未知数的定义", "未知数的定义"),
        ("Unknown Pleasures album", "Unknown Pleasures album"),
    ],
)
def test_ua_answer_normalisation(reply: str, expected: str) -> None:
    assert normalise_answer(reply) == expected


def test_ua_empty_answer_is_reasked(llm_server: ScriptedServer, services: Services) -> None:
    llm_server.script("  ", "Europe")
    ua = built(LLMUserAnswerer, services, model=SPEC, prompt="ua")
    assert run(ua.answer("best universities for AI in Europe", "Which region?")) == "Europe"
    assert len(llm_server.requests) == 2


def test_rewriter_single_line_and_no_pairs(llm_server: ScriptedServer, services: Services) -> None:
    rewriter = built(LLMRewriter, services, model=SPEC, prompt="rewriter")
    assert run(rewriter.rewrite("best universities for AI", [])) == "best universities for AI"
    assert llm_server.requests == []
    llm_server.script("Line one\nLine two", '"best universities in Europe for AI"')
    qa = [QA("Which region?", "Europe"), QA("Which year?", UNKNOWN)]
    assert run(rewriter.rewrite("best universities for AI", qa)) == "best universities in Europe for AI"
    user = llm_server.requests[0].body["messages"][1]["content"]
    assert "Q1: Which region?\nA1: Europe" in user and "A2: unknown" in user


def test_judge_labels_all_nuggets_in_one_call(llm_server: ScriptedServer, services: Services) -> None:
    llm_server.script("{'n1': 'FULL', 'n2': 'none', 'n3': 'partial',}")
    labels = run(built(LLMJudge, services, model=SPEC, prompt="judge").judge("Oxford is first.", NUGGETS))
    assert labels == {"n1": "full", "n2": "none", "n3": "partial"}
    (request,) = llm_server.requests
    user = request.body["messages"][1]["content"]
    assert all(f"{n.id}: {n.text}" in user for n in NUGGETS)


def test_judge_accepts_list_form(llm_server: ScriptedServer, services: Services) -> None:
    llm_server.script(json.dumps([{"id": n.id, "label": "none"} for n in NUGGETS]))
    assert set(run(built(LLMJudge, services, model=SPEC, prompt="judge").judge("x", NUGGETS)).values()) == {"none"}


@pytest.mark.parametrize(
    "bad",
    [
        '{"n1": "full", "n2": "none"}',  # missing n3
        '{"n1": "full", "n2": "none", "n3": "none", "n9": "full"}',  # unknown id
        '{"n1": "full", "n2": "none", "n3": "mostly"}',  # invalid label
        '{"n1": "full", "n2": "no',  # truncated
    ],
)
def test_judge_invalid_labels_reask_then_unscored(bad: str, llm_server: ScriptedServer, services: Services) -> None:
    llm_server.default = bad
    with pytest.raises(UnscoredError):
        run(built(LLMJudge, services, model=SPEC, prompt="judge", max_reasks=1).judge("x", NUGGETS))
    assert len(llm_server.requests) == 2


def test_judge_recovers_after_reask(llm_server: ScriptedServer, services: Services) -> None:
    llm_server.script('{"n1": "full"}', '{"n1": "full", "n2": "partial", "n3": "none"}')
    assert run(built(LLMJudge, services, model=SPEC, prompt="judge").judge("x", NUGGETS))["n2"] == "partial"
    assert "missing ids ['n2', 'n3']" in llm_server.requests[1].body["messages"][-1]["content"]


def test_judge_no_nuggets_makes_no_call(llm_server: ScriptedServer, services: Services) -> None:
    assert run(built(LLMJudge, services, model=SPEC, prompt="judge").judge("x", ())) == {}
    assert llm_server.requests == []


EVIDENCE = (
    Evidence("e1", "local://1", "Oxford", "Oxford ranks first in AI."),
    Evidence("e2", "local://2", "ETH", "ETH Zurich is in Switzerland."),
)


def test_extractor_builds_grounded_gold(llm_server: ScriptedServer, services: Services) -> None:
    gold = {
        "nuggets": [
            {"id": "n1", "text": "Oxford ranks first", "weight": "3", "evidence_ids": ["e1"]},
            {"text": "ETH is Swiss", "weight": 2, "evidence_ids": ["e2", "e1"]},
        ],
        "must_cover": ["which universities"],
        "missing_evidence": [],
        "unsupported_claims": "a claim",
    }
    llm_server.script(json.dumps(gold))
    draft = run(
        built(LLMExtractor, services, model=SPEC, prompt="extractor").extract(
            "AI unis in Europe", "Oxford...", EVIDENCE
        )
    )
    assert isinstance(draft, GoldDraft)
    assert [(n.id, n.weight, n.evidence_ids) for n in draft.nuggets] == [
        ("n1", 3, ("e1",)),
        ("n2", 2, ("e2", "e1")),
    ]
    assert draft.must_cover == ("which universities",) and draft.unsupported_claims == ("a claim",)
    assert "[e2] ETH (local://2)" in llm_server.requests[0].body["messages"][1]["content"]


@pytest.mark.parametrize(
    "nugget",
    [
        {"text": "x", "weight": 3, "evidence_ids": ["e7"]},  # unknown evidence id
        {"text": "x", "weight": 5, "evidence_ids": ["e1"]},  # weight out of range
        {"text": "x", "weight": 2, "evidence_ids": []},  # ungrounded
        {"text": "", "weight": 2, "evidence_ids": ["e1"]},  # empty
    ],
)
def test_extractor_rejects_invalid_nuggets(nugget: dict, llm_server: ScriptedServer, services: Services) -> None:
    llm_server.default = json.dumps({"nuggets": [nugget]})
    with pytest.raises(UnscoredError):
        run(built(LLMExtractor, services, model=SPEC, prompt="extractor", max_reasks=0).extract("q", "a", EVIDENCE))
    assert len(llm_server.requests) == 1


CANARIES = ("CANARY-7f3a9c", "金丝雀暗号九七")


def test_fused_query_never_reaches_clarifier_or_rewriter(llm_server: ScriptedServer, services: Services) -> None:
    instance = Instance(
        id="c1",
        blurred_query="best universities for AI",
        fused_query=f"best universities for AI in Europe for master's study {CANARIES[0]} {CANARIES[1]}",
    )
    llm_server.handler = lambda body: "Europe" if "Intent query:" in json.dumps(body) else protocol_reply(body)
    clarifier, ua = (
        built(LLMClarifier, services, model=SPEC, prompt="clarifier"),
        built(LLMUserAnswerer, services, model=SPEC, prompt="ua"),
    )
    rewriter = built(LLMRewriter, services, model=SPEC, prompt="rewriter")

    async def protocol() -> str:
        questions = await clarifier.ask(instance.blurred_query, 3)
        answers = [await ua.answer(instance.fused_query, q) for q in questions]
        return await rewriter.rewrite(instance.blurred_query, [QA(q, a) for q, a in zip(questions, answers)])

    run(protocol())
    by_prompt: dict[str, list[str]] = {"clarifier": [], "ua": [], "rewriter": []}
    for request in llm_server.requests:
        text = json.dumps(request.body, ensure_ascii=False)
        kind = "ua" if "Intent query:" in text else "rewriter" if "Original query:" in text else "clarifier"
        by_prompt[kind].append(text)
    assert [len(v) for v in by_prompt.values()] == [1, 3, 1]
    assert all(c in text for text in by_prompt["ua"] for c in CANARIES)  # the canary is wired in
    leaked = [c for text in by_prompt["clarifier"] + by_prompt["rewriter"] for c in CANARIES if c in text]
    assert leaked == []
    for method in (LLMClarifier.ask, LLMRewriter.rewrite):
        assert "fused_query" not in inspect.signature(method).parameters


GROUPS = ("clarifier", "ua", "rewriter", "judge", "extractor")
MODELS = ("gpt", "claude", "gemini", "ernie", "qwen", "kimi", "deepseek")
CLASSES = {
    "clarifier": LLMClarifier,
    "ua": LLMUserAnswerer,
    "rewriter": LLMRewriter,
    "judge": LLMJudge,
    "extractor": LLMExtractor,
}


def test_every_llm_option_composes_and_instantiates(services: Services, llm_server: ScriptedServer) -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for model in MODELS:
            overrides = [f"{group}={model}" for group in GROUPS]
            cfg = compose("config", overrides=overrides)
            for group in GROUPS:
                role = build_node(cfg[group], services)
                assert type(role) is CLASSES[group]
                assert isinstance(role.client.spec, ModelSpec) and role.client.spec.name == model
                assert role.client.role == group
                params = role.client.spec.params  # temperature 0, or a reasoning level where refused (gpt)
                assert params.get("temperature") == 0 or (
                    params.get("reasoning_effort") and "temperature" in role.client.spec.request.rejected
                )
                assert role.client.spec.input_cost_per_token > 0 and role.client.spec.api_key_env
    assert llm_server.requests == []


def test_full_protocol_over_http_with_protocol_reply(llm_server: ScriptedServer, services: Services) -> None:
    llm_server.handler = protocol_reply
    clarifier, ua = (
        built(LLMClarifier, services, model=SPEC, prompt="clarifier"),
        built(LLMUserAnswerer, services, model=SPEC, prompt="ua"),
    )
    rewriter, judge = (
        built(LLMRewriter, services, model=SPEC, prompt="rewriter"),
        built(LLMJudge, services, model=SPEC, prompt="judge"),
    )
    extractor = built(LLMExtractor, services, model=SPEC, prompt="extractor")

    async def protocol() -> tuple:
        qs = await clarifier.ask("最好的人工智能大学", 2)
        answers = [await ua.answer("欧洲最好的人工智能大学", q) for q in qs]
        query = await rewriter.rewrite("最好的人工智能大学", [QA(q, a) for q, a in zip(qs, answers)])
        draft = await extractor.extract("欧洲最好的人工智能大学", "牛津大学排名第一。", EVIDENCE)
        labels = await judge.judge("Oxford ranks first in AI.", draft.nuggets)
        return qs, answers, query, labels

    qs, answers, query, labels = run(protocol())
    assert len(qs) == 2 and answers == [UNKNOWN, UNKNOWN] and query == "最好的人工智能大学"
    assert labels["n1"] == "full" and labels["n2"] == "none"
    assert set(services.llm.usage()) == {"clarifier", "ua", "rewriter", "extractor", "judge"}
