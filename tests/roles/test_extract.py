"""Rule-based extractor: lead-sentence nuggets, weights by position, citations, CJK."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cts.compose.app import build_node
from cts.core.contracts import Extractor
from cts.core.types import Evidence, Gold, GoldDraft
from cts.gold import validate_gold
from cts.roles.nuggets import RuleExtractor, unsupported_claims

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")

EN = Evidence(
    "doc-7",
    "local://7",
    "Marie Curie",
    "Marie Curie was a Polish and naturalised-French physicist. She won the Nobel Prize in Physics in 1903. "
    "Yes. She was the first woman to win a Nobel Prize. Dr. Curie later won a second prize in chemistry. "
    "She died in 1934 in Passy.",
)
ZH = Evidence(
    "zh-1",
    "local://zh1",
    "长城",
    "长城是中国古代的军事防御工程。它始建于春秋战国时期！嗯。明长城东起鸭绿江，西至嘉峪关？长城后来被列入世界遗产名录。",
)
OTHER = Evidence("doc-9", "local://9", "Paris", "Paris is the capital and largest city of France.")


def _extract(ex: RuleExtractor, evidence: list[Evidence], answer: str = "", q: str = "q*") -> GoldDraft:
    return asyncio.run(ex.extract(q, answer, evidence))


def test_rule_extractor_is_an_extractor() -> None:
    assert isinstance(RuleExtractor(), Extractor)


def test_english_lead_sentences_weighted_by_position() -> None:
    draft = _extract(RuleExtractor(), [EN, OTHER], q="Who was Marie Curie?")
    assert [(n.id, n.weight, n.evidence_ids) for n in draft.nuggets] == [
        ("n1", 3, ("doc-7",)),
        ("n2", 2, ("doc-7",)),
        ("n3", 1, ("doc-7",)),
        ("n4", 1, ("doc-7",)),
        ("n5", 1, ("doc-7",)),
    ]
    assert draft.nuggets[0].text == "Marie Curie was a Polish and naturalised-French physicist."
    assert draft.nuggets[3].text == "Dr. Curie later won a second prize in chemistry."  # abbreviation kept
    assert "Yes." not in [n.text for n in draft.nuggets]  # short fragment skipped
    assert draft.must_cover == ("Who was Marie Curie?",) and draft.missing_evidence == ()


def test_chinese_sentences_split_at_cjk_punctuation() -> None:
    draft = _extract(RuleExtractor(), [ZH])
    assert [n.text for n in draft.nuggets] == [
        "长城是中国古代的军事防御工程。",
        "它始建于春秋战国时期！",
        "明长城东起鸭绿江，西至嘉峪关？",
        "长城后来被列入世界遗产名录。",
    ]
    assert [n.weight for n in draft.nuggets] == [3, 2, 1, 1]
    assert all(n.evidence_ids == ("zh-1",) for n in draft.nuggets)


def test_max_docs_max_nuggets_and_custom_weights() -> None:
    empty = Evidence("blank", "local://0", "Nothing", "Ok.")
    ex = RuleExtractor(max_docs=2, max_nuggets=6, weights=[2, 1])
    draft = _extract(ex, [empty, OTHER, ZH, EN])
    # the blank document yields no sentence, so the two documents used are OTHER and ZH
    assert [(n.evidence_ids[0], n.weight) for n in draft.nuggets] == [
        ("doc-9", 2),
        ("zh-1", 2),
        ("zh-1", 1),
        ("zh-1", 1),
        ("zh-1", 1),
    ]
    assert len(_extract(RuleExtractor(max_docs=5, max_nuggets=3), [EN, ZH]).nuggets) == 3


def test_repeated_sentences_become_one_nugget() -> None:
    copy = Evidence("doc-8", "local://8", "Copy", OTHER.snippet + " Paris hosts the Louvre museum today.")
    draft = _extract(RuleExtractor(max_docs=2), [OTHER, copy])
    assert [(n.text, n.evidence_ids, n.weight) for n in draft.nuggets] == [
        (OTHER.snippet, ("doc-9",), 3),
        ("Paris hosts the Louvre museum today.", ("doc-8",), 3),
    ]


def test_no_usable_evidence_gives_no_nuggets() -> None:
    assert _extract(RuleExtractor(), []).nuggets == ()


def test_unsupported_claims_are_answer_sentences_missing_from_evidence() -> None:
    answer = "Marie Curie won the Nobel Prize in Physics in 1903. She invented the telephone in Boston. 长城始建于春秋战国时期。"
    claims = unsupported_claims(answer, [EN, ZH], support=0.5)
    assert claims == ("She invented the telephone in Boston.",)
    assert unsupported_claims("", [EN], 0.5) == ()
    assert unsupported_claims("Anything at all here.", [], 0.5) == ("Anything at all here.",)


def test_draft_becomes_valid_gold() -> None:
    draft = _extract(RuleExtractor(max_docs=3), [EN, ZH])
    gold = Gold("g", draft.nuggets, evidence=(EN, ZH), must_cover=draft.must_cover)
    assert validate_gold(gold, {EN.id, ZH.id}) == []


@pytest.mark.parametrize(
    "kwargs",
    [{"weights": [4]}, {"weights": []}, {"weights": [2.5]}, {"max_docs": 0}, {"support": 2.0}],
)
def test_bad_settings_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RuleExtractor(**kwargs)  # type: ignore[arg-type]


def test_config_instantiates_the_rule_extractor() -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("extractor/rules")
    ex = build_node(cfg.extractor, None)
    assert isinstance(ex, RuleExtractor)
    assert (ex.max_nuggets, ex.max_docs, ex.weights, ex.min_tokens, ex.support) == (
        6,
        1,
        (3, 2, 1),
        3,
        0.5,
    )
