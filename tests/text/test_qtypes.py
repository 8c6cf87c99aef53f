"""Question typing: English and Chinese lexicons (incl. tricky negatives) and the LLM typer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cts.compose.app import build_node
from cts.compose.services import Services
from cts.roles.qtyper import LexiconQuestionTyper, LLMQuestionTyper
from cts.roles.qtyper import parse_question_types as parse_labels
from cts.text.qtypes import QTYPES, classify_question, is_region_only, normalize_types
from tests.llm_server import ScriptedServer, llm_settings

CONF = str(Path(__file__).resolve().parents[2] / "conf")

CASES = [
    # --- English: the rule clarifier's templates (frame after the quoted head is removed)
    ("Which region or place are you asking about for ?", ("region",)),
    ("Which time period of  are you asking about?", ("time",)),
    ("Which  do you mean: which sense, work or specific entity?", ("scope",)),
    ("By what definition or criterion should  be understood?", ("definition",)),
    # --- quoted spans echo the query and are not cues (the pipeline types the full question)
    ("Which “Basque Country” do you mean: which sense, work or specific entity?", ("scope",)),
    ("Which time period of “1984” are you asking about?", ("time",)),
    ('Which region or place are you asking about for "History of Japan"?', ("region",)),
    ("您问的“北京烤鸭”是哪个地区或地点？", ("region",)),
    ("您说的“2019年大选”具体指哪一个？", ("scope",)),
    # --- English: typical LLM questions
    ("Which country are you interested in?", ("region",)),
    ("Which country do you mean?", ("region",)),  # generic "do you mean" does not add scope
    ("Which specific city?", ("region",)),
    ("Where do you plan to study?", ("region",)),
    ("Are you asking about China or the US?", ("region",)),
    ("When did it take place?", ("time",)),
    ("Do you want results from the last year?", ("time",)),
    ("Are you interested in the 1990s or today?", ("time",)),
    ("Which university do you mean?", ("scope",)),
    ("Who is the author you have in mind?", ("scope",)),
    ("What kind of car are you looking for?", ("scope",)),
    ("How would you define success here?", ("definition",)),
    ("When you say best, what do you mean?", ("definition",)),
    ("In which city and in which year?", ("region", "time")),
    ("Which version was released in which country?", ("region", "scope")),
    # --- English: tricky negatives
    ("Which period of Rome's history are you interested in?", ("time",)),  # names a place, asks time
    ("Which area of mathematics?", ("scope",)),  # "area" is not a place here
    ("How many times has it happened?", ("other",)),
    ("What do you want to know?", ("other",)),
    ("Let us know more.", ("other",)),  # "us" is not the US
    # --- Chinese: the rule clarifier's templates (frame after the quoted head is removed)
    ("您问的 是哪个地区或地点？", ("region",)),
    ("您关注的是 的哪个时间段或时期？", ("time",)),
    ("您说的 具体指哪一个（哪种含义、作品或对象）？", ("scope",)),
    (" 按什么定义或标准来理解？", ("definition",)),
    # --- Chinese: typical LLM questions
    ("您想了解哪个城市的房价？", ("region",)),
    ("您指的是哪个城市？", ("region",)),
    ("您想了解哪个省份？", ("region",)),
    ("是国内还是国外？", ("region",)),
    ("您关注北京还是上海？", ("region",)),
    ("您想了解哪一年的数据？", ("time",)),
    ("2019年还是2020年？", ("time",)),
    ("您指的是哪款手机？", ("scope",)),
    ("您想了解的是哪个方面？", ("scope",)),
    ("谁是您关注的作者？", ("scope",)),
    ("您说的“苹果”是指水果还是公司？", ("scope",)),
    ("您关注的是市值排名吗？", ("definition",)),
    ("您指的是哪一年在哪个城市举办的比赛？", ("region", "time")),
    # --- Chinese: single characters 市/省/区/国 must not make a region question
    ("您关注的是市场规模还是增长率？", ("other",)),
    ("您更关注省钱还是省时？", ("other",)),
    ("您想了解哪家上市公司？", ("scope",)),
    ("这两者有什么区别？", ("other",)),
    ("您想了解超市的营业时间吗？", ("time",)),
    ("您想知道什么？", ("other",)),
]


@pytest.mark.parametrize(("question", "expected"), CASES)
def test_lexicon_types(question: str, expected: tuple[str, ...]) -> None:
    assert classify_question(question) == expected


def test_cases_cover_every_type_in_both_languages() -> None:
    from cts.text.tokens import language

    for lang in ("en", "zh"):
        seen = {t for q, types in CASES if language(q) == lang for t in types}
        assert seen == set(QTYPES), lang


def test_region_only() -> None:
    assert is_region_only(classify_question("Which country?"))
    assert not is_region_only(classify_question("In which city and in which year?"))
    assert not is_region_only(("other",))


def test_lexicon_typer_is_async_and_built_from_config() -> None:
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config")
    typer = build_node(cfg.qtyper, None)
    assert isinstance(typer, LexiconQuestionTyper)
    assert asyncio.run(typer.classify("您想了解哪个城市的房价？")) == ("region",)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('["region"]', ("region",)),
        ('```json\n["time", "region"]\n```', ("region", "time")),
        ('Labels: ["Scope"]', ("scope",)),
        ('{"types": ["definition", "other"]}', ("definition",)),  # "other" only when alone
        ('["other"]', ("other",)),
        ('["place"]', None),
        ("[]", None),
        ("region", None),
    ],
)
def test_parse_labels(text: str, expected: tuple[str, ...] | None) -> None:
    assert parse_labels(text) == expected


def test_normalize_types_rejects_unknown() -> None:
    with pytest.raises(ValueError):
        normalize_types(["weather"])


def _llm_typer(server: ScriptedServer, tmp_path: Path) -> LLMQuestionTyper:
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=["qtyper=llm"])
    services = Services(cache_dir=tmp_path, settings={"llm": llm_settings(server, max_reasks=1)})
    typer = build_node(cfg.qtyper, services)
    assert isinstance(typer, LLMQuestionTyper)
    return typer


def test_llm_typer_over_http(llm_server: ScriptedServer, tmp_path: Path) -> None:  # noqa: F811
    typer = _llm_typer(llm_server, tmp_path)
    llm_server.script('["time", "region"]')
    assert asyncio.run(typer.classify("Which year and where?")) == ("region", "time")
    body = llm_server.requests[0].body
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][-1]["content"].startswith("Question: Which year and where?")


def test_llm_typer_reasks_then_falls_back_to_lexicon(llm_server: ScriptedServer, tmp_path: Path) -> None:  # noqa: F811
    typer = _llm_typer(llm_server, tmp_path)
    llm_server.script("I think it is about a place.", '["weather"]')
    assert asyncio.run(typer.classify("您想了解哪个城市？")) == ("region",)  # lexicon answer
    assert len(llm_server.requests) == 2  # first call + one re-ask
    reask = llm_server.requests[1].body["messages"]
    assert reask[-2] == {"role": "assistant", "content": "I think it is about a place."}
