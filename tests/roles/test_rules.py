import asyncio

import pytest

from cts.compose.services import place_lexicon
from cts.core.types import QA, UNKNOWN
from cts.roles.rules import (
    NoClarifier,
    RuleClarifier,
    RuleRewriter,
    RuleUserAnswerer,
    head_term,
)
from cts.text.qtypes import classify_question


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize(
    ("query", "head"),
    [
        ("Tell me about Mercury", "Mercury"),
        ("What is the Eastern Front?", "Eastern Front"),
        ("Republic", "Republic"),
        ("介绍一下长城", "长城"),
        ("长城是什么？", "长城"),
    ],
)
def test_head_term(query, head):
    assert head_term(query) == head


def test_clarifier_asks_exactly_k_distinct_questions_in_order():
    scope_first = RuleClarifier(order=["scope", "time", "region"])
    region_first = RuleClarifier(order=["region", "time", "scope"])
    for k in (1, 2, 3):
        qs = run(scope_first.ask("Tell me about Mercury", k))
        assert len(qs) == k == len(set(qs)) and all("Mercury" in q for q in qs)
    assert "scope" in classify_question(run(scope_first.ask("Tell me about Mercury", 1))[0])
    assert classify_question(run(region_first.ask("Tell me about Mercury", 1))[0]) == ("region",)
    assert classify_question(run(region_first.ask("Tell me about Mercury", 2))[1]) == ("time",)


def test_clarifier_speaks_the_query_language_and_checks_k():
    (q,) = run(RuleClarifier(order=["region"]).ask("介绍一下长城", 1))
    assert "长城" in q and "地区" in q
    with pytest.raises(ValueError):
        run(RuleClarifier().ask("x", 5))
    with pytest.raises(ValueError):
        RuleClarifier(order=["weather"])


def test_no_clarifier_asks_nothing():
    assert run(NoClarifier().ask("Tell me about Mercury", 3)) == []


@pytest.fixture(scope="module")
def ua(services):
    return RuleUserAnswerer(place_lexicon(services))


@pytest.fixture(scope="module")
def questions():
    c = RuleClarifier(order=["scope", "time", "region"])
    return lambda q: dict(zip(("scope", "time", "region"), run(c.ask(q, 3))))


@pytest.mark.parametrize(
    ("blurred", "fused", "expected"),
    [
        (
            "Tell me about Mercury",
            "Tell me about Mercury, the planet",
            {"scope": "planet", "time": UNKNOWN, "region": UNKNOWN},
        ),
        (
            "Eastern Front",
            "Eastern Front during World War I",
            {"scope": "World War I", "time": "World War I", "region": UNKNOWN},
        ),
        (
            "What was the Great Famine?",
            "What was the Great Famine in Ireland?",
            {"scope": "Ireland", "time": UNKNOWN, "region": "Ireland"},
        ),
        ("Jin dynasty", "Jin dynasty (266–420)", {"time": "266–420"}),
        ("Republic", "Republic by Plato", {"scope": "Plato", "time": UNKNOWN, "region": UNKNOWN}),
        ("Psycho", "Psycho, the 1960 film", {"scope": "1960 film", "time": "1960", "region": UNKNOWN}),
    ],
)
def test_ua_answers_minimal_span_or_unknown(ua, questions, blurred, fused, expected):
    qs = questions(blurred)
    for dim, answer in expected.items():
        assert run(ua.answer(fused, qs[dim])) == answer, dim


def test_ua_chinese(ua, questions):
    qs = questions("介绍一下长安")
    assert run(ua.answer("介绍一下唐朝的长安", qs["time"])) == "唐朝"
    assert run(ua.answer("介绍一下唐朝的长安", qs["region"])) == UNKNOWN
    assert run(ua.answer("介绍一下唐朝的长安", qs["scope"])) == "唐朝"
    qs = questions("最好的大学")
    assert run(ua.answer("北京最好的大学", qs["region"])) == "北京"


def test_ua_sees_only_intent_and_question(ua):
    # The head term is never answered back as a region, even when it is a place.
    q = run(RuleClarifier(order=["region"]).ask("Tell me about New York", 1))[0]
    assert run(ua.answer("Tell me about New York, the state", q)) == UNKNOWN


def test_rewriter_adds_known_answers_only():
    rw = RuleRewriter()
    qa = [QA("Which sense?", "planet"), QA("Which region?", UNKNOWN)]
    assert run(rw.rewrite("Tell me about Mercury?", qa)) == "Tell me about Mercury, planet"
    assert run(rw.rewrite("Tell me about Mercury", [QA("q", UNKNOWN)])) == "Tell me about Mercury"
    assert (
        run(rw.rewrite("Eastern Front", [QA("a", "World War I"), QA("b", "World War I")]))
        == "Eastern Front, World War I"
    )
    assert run(rw.rewrite("介绍一下长安", [QA("哪个时期？", "唐朝")])) == "介绍一下长安，唐朝"
