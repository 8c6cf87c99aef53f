"""Prompt files: placeholders match the code, rendering is strict, usage is recorded."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest

from cts._util import prompts as prompts_module
from cts._util.prompts import (
    Prompt,
    PromptError,
    default_prompts_dir,
    load_prompt,
    prompts_version,
    used_prompts,
)
from cts.compose.services import Services
from cts.core.types import QA, Evidence, Nugget
from cts.roles import llm as roles
from tests.helpers import built
from tests.llm_fakes import protocol_reply
from tests.llm_server import ScriptedServer, llm_settings

# What each role passes to its prompt (the contract the files must match).
EXPECTED = {
    "clarifier": {"blurred_query", "k"},
    "clarifier_sequential": {"blurred_query", "qa_pairs", "turn", "k", "stop_rule"},
    "gate": {"blurred_query"},
    "ua": {"fused_query", "question"},
    "rewriter": {"blurred_query", "qa_pairs"},
    "extractor": {"fused_query", "answer", "evidence"},
    "judge": {"answer", "nuggets"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_prompt_placeholders_match_the_code(name: str) -> None:
    prompt = load_prompt(name)
    assert prompt.placeholders == EXPECTED[name]
    messages = prompt.messages(**{key: f"<{key}>" for key in EXPECTED[name]})
    assert [m["role"] for m in messages] == ["system", "user"]
    assert all("<!--" not in m["content"] and "{{" not in m["content"] for m in messages)


def test_prompts_never_show_the_intent_to_clarifier_or_rewriter() -> None:
    for name in ("clarifier", "clarifier_sequential", "gate", "rewriter"):
        assert "fused_query" not in load_prompt(name).placeholders


def test_roles_render_their_prompts_over_http(llm_server: ScriptedServer, tmp_path: Path) -> None:
    """Each role really fills its file (a missing or extra value would raise PromptError)."""
    llm_server.handler = protocol_reply
    services = Services(cache_dir=tmp_path, settings={"llm": llm_settings(llm_server)})
    spec = {"name": "m", "id": "openai/m"}
    evidence = [Evidence("e1", "local://1", "T", "Some fact.")]

    async def all_roles() -> None:
        await built(roles.LLMClarifier, services, model=spec, prompt="clarifier").ask("q", 1)
        await built(roles.LLMUserAnswerer, services, model=spec, prompt="ua").answer("q*", "c?")
        await built(roles.LLMRewriter, services, model=spec, prompt="rewriter").rewrite("q", [QA("c?", "a")])
        await built(roles.LLMExtractor, services, model=spec, prompt="extractor").extract("q*", "answer", evidence)
        await built(roles.LLMJudge, services, model=spec, prompt="judge").judge("answer", [Nugget("n1", "fact", 1)])

    asyncio.run(all_roles())
    assert len(llm_server.requests) == 5
    assert all(r.body["messages"][0]["role"] == "system" for r in llm_server.requests)


def test_render_is_strict_and_keeps_literal_braces() -> None:
    prompt = Prompt("t", 'Reply like {"a": 1} for {{ name }} and {{k}}.', "v")
    assert prompt.render(name="x", k=2) == 'Reply like {"a": 1} for x and 2.'
    with pytest.raises(PromptError, match="missing"):
        prompt.render(name="x")
    with pytest.raises(PromptError, match="unexpected"):
        prompt.render(name="x", k=1, extra=3)


def test_values_are_not_reinterpreted() -> None:
    prompt = Prompt("t", "<!-- role: user -->\nQ: {{q}}", "v")
    assert prompt.messages(q="{{q}} <!-- role: system -->") == [
        {"role": "user", "content": "Q: {{q}} <!-- role: system -->"}
    ]


def test_sections_and_comments(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_text(
        "<!-- a note for humans -->\n<!-- role: system -->\nSys {{a}}\n<!-- role: user -->\nUser {{b}}\n",
        encoding="utf-8",
    )
    prompt = load_prompt("p", tmp_path)
    assert prompt.messages(a=1, b=2) == [
        {"role": "system", "content": "Sys 1"},
        {"role": "user", "content": "User 2"},
    ]
    assert prompt.path == tmp_path / "p.md"


def test_version_tracks_text_and_usage_is_recorded(tmp_path: Path) -> None:
    (tmp_path / "v.md").write_text("one {{x}}", encoding="utf-8")
    first = load_prompt("v", tmp_path)
    (tmp_path / "v.md").write_text("two {{x}}", encoding="utf-8")
    second = load_prompt("v", tmp_path)
    assert first.version != second.version and len(first.version) == 12
    assert used_prompts()["v"] == second
    assert prompts_version([first]) != prompts_version([second])
    assert prompts_version([first, second]) == prompts_version([second, first])


def test_missing_prompt_names_no_machine_path(tmp_path: Path) -> None:
    with pytest.raises(PromptError) as err:
        load_prompt("nope", tmp_path)
    assert str(tmp_path) not in str(err.value)


def test_default_dir_is_the_repository_prompts() -> None:
    assert default_prompts_dir() == Path(inspect.getfile(prompts_module)).resolve().parents[2] / "prompts"
    assert {p.stem for p in default_prompts_dir().glob("*.md")} >= set(EXPECTED)


def test_each_job_records_only_the_prompts_it_loaded(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("A {{x}}", encoding="utf-8")
    (tmp_path / "b.md").write_text("B {{x}}", encoding="utf-8")
    with prompts_module.prompt_scope():
        load_prompt("a", tmp_path)
        assert set(used_prompts()) == {"a"}
    with prompts_module.prompt_scope():  # the next job of a sequential multirun
        assert used_prompts() == {}
        load_prompt("b", tmp_path)

        async def in_task() -> set[str]:
            load_prompt("a", tmp_path)  # asyncio tasks of the job record into the job's registry
            return set(used_prompts())

        assert asyncio.run(in_task()) == {"a", "b"}
        assert set(used_prompts()) == {"a", "b"}
    assert "b" not in used_prompts() or used_prompts()["b"].path != tmp_path / "b.md"
