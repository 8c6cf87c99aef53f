"""Repeats: the repeat index in the LLM and tool cache keys (repeat 0 keeps today's), sampling per repeat."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from llm_server import ScriptedServer, llm_settings

from cts.llm import LLMRuntime, ModelSpec, ResponseCache, current_sample, sample_scope
from cts.search.toolcache import ToolCache, search_args, visit_args

SPEC = ModelSpec("ernie", "openai/ernie-4.5-turbo-128k", params={"temperature": 0})
MESSAGES = [{"role": "user", "content": "Which region?"}]
# Keys the tool cache wrote before repeats existed (computed with the code of the commit before them).
OLD_SEARCH_KEY = "96ee95241436b628c9e5fff9f1f4f812e1fc7f94dae936459111bc3dc4350149"
OLD_VISIT_KEY = "6204e10d111607f7b54ff23196210cce592690801f825804d6a894b402ff50c5"


def runtime(server: ScriptedServer, path: Path) -> LLMRuntime:
    return LLMRuntime.from_settings(llm_settings(server, cache={"mode": "read_write", "path": str(path)}), path.parent)


def call(rt: LLMRuntime) -> Any:
    return asyncio.run(rt.client(SPEC, "ua").complete(MESSAGES, prompt_version="v1"))


def in_scope(repeat: int, temperature: float | None, work: Any) -> Any:
    with sample_scope(repeat, temperature):
        return work()


def test_tool_cache_keys_at_repeat_0_are_the_keys_written_before_repeats():
    cache = ToolCache(Path("unused.sqlite"), "off")
    with sample_scope(0, temperature=0.7):
        assert cache.key("bm25:en-us", "search", search_args("Mercury moons", 10)) == OLD_SEARCH_KEY
        assert cache.key("local", "visit", visit_args("local://Mercury", "moons", 8000)) == OLD_VISIT_KEY
    assert cache.key("bm25:en-us", "search", search_args("Mercury moons", 10)) == OLD_SEARCH_KEY  # no scope
    with sample_scope(1):
        one = cache.key("bm25:en-us", "search", search_args("Mercury moons", 10))
    with sample_scope(2):
        two = cache.key("bm25:en-us", "search", search_args("Mercury moons", 10))
    assert len({OLD_SEARCH_KEY, one, two}) == 3


def test_llm_key_at_repeat_0_is_today_s_and_an_existing_cache_still_hits(llm_server, tmp_path, monkeypatch):
    seen: list[dict[str, Any]] = []
    plain = ResponseCache.key
    monkeypatch.setattr(ResponseCache, "key", staticmethod(lambda obj: seen.append(obj) or plain(obj)))
    path = tmp_path / "cache.sqlite"
    call(runtime(llm_server, path))  # a cache written as every job before repeats wrote it
    assert len(llm_server.requests) == 1
    assert set(seen[0]) == {"api_base", "model", "messages", "params", "prompt_version"}
    assert in_scope(0, 0.9, lambda: call(runtime(llm_server, path))).cached  # repeat 0: served, no request
    assert len(llm_server.requests) == 1 and seen[1] == seen[0]
    assert not in_scope(1, None, lambda: call(runtime(llm_server, path))).cached  # repeat 1: its own sample
    assert in_scope(1, None, lambda: call(runtime(llm_server, path))).cached  # ... cached under its own key
    assert len(llm_server.requests) == 2 and seen[2] == {**seen[0], "repeat": 1}


def test_repeat_temperature_applies_past_repeat_0_only(llm_server, tmp_path):
    path = tmp_path / "cache.sqlite"
    in_scope(0, 0.8, lambda: call(runtime(llm_server, path)))
    in_scope(1, 0.8, lambda: call(runtime(llm_server, path)))
    in_scope(2, None, lambda: call(runtime(llm_server, path)))
    temps = [r.body.get("temperature") for r in llm_server.requests]
    assert temps == [0, 0.8, 0]  # the registry's temperature unless repeat_temperature is set (repeat > 0)


def test_the_scope_reaches_tasks_started_inside_and_ends_with_the_block():
    async def inner() -> int:
        return current_sample().repeat

    async def outer() -> tuple[int, int]:
        with sample_scope(3):
            task = asyncio.ensure_future(inner())
        return await task, current_sample().repeat

    assert asyncio.run(outer()) == (3, 0)


@pytest.mark.parametrize("repeat", [0, 1])
def test_sample_scope_drops_the_temperature_at_repeat_0(repeat):
    with sample_scope(repeat, 0.7) as sample:
        assert sample.temperature == (0.7 if repeat else None)
