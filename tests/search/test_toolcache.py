"""The tool cache: normalised keys, hit/miss counting, modes and the store predicate."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cts.compose.services import Services, tool_cache
from cts.search.toolcache import (
    TOOL_CACHE_FILE,
    ToolCache,
    search_args,
    visit_args,
)


def lookup(cache: ToolCache, args: dict, value: dict | None = None, **kwargs) -> tuple[dict, bool, int]:
    """Run get_or_compute; returns (value, cached, number of computes)."""
    computed = []

    async def compute() -> dict:
        computed.append(1)
        return value if value is not None else {"hits": [len(computed)]}

    result, cached = asyncio.run(cache.get_or_compute("serper:x", "search", args, compute, **kwargs))
    return result, cached, len(computed)


def test_search_args_normalise_case_width_and_white_space():
    assert search_args("  Capital   of\tFRANCE ", 10) == search_args("capital of france", 10)
    assert search_args("ＡＢＣ　北京", 10) == search_args("abc 北京", 10)  # NFKC: full-width forms
    assert search_args("paris", 10) != search_args("paris", 5)
    assert search_args("paris", 10) != search_args("parish", 10)


def test_visit_args_keep_url_case_and_normalise_the_goal():
    a = visit_args("https://example.org/Wiki/Paris", "  Find the POPULATION ", 1000)
    assert a == visit_args("https://example.org/Wiki/Paris", "find the population", 1000)
    assert a != visit_args("https://example.org/wiki/paris", "find the population", 1000)
    assert a != visit_args("https://example.org/Wiki/Paris", "find the population", 2000)


def test_miss_then_hit_and_counters(tmp_path: Path):
    cache = ToolCache(tmp_path / "t.sqlite")
    first = lookup(cache, search_args("Paris", 10))
    second = lookup(cache, search_args("  PARIS ", 10))
    assert first == ({"hits": [1]}, False, 1)
    assert second == ({"hits": [1]}, True, 0)
    assert cache.counters() == {"tool_cache_hits": 1, "tool_cache_misses": 1}


def test_key_separates_source_and_tool(tmp_path: Path):
    cache = ToolCache(tmp_path / "t.sqlite")
    args = search_args("paris", 10)
    keys = {
        cache.key("serper:a", "search", args),
        cache.key("serper:b", "search", args),
        cache.key("serper:a", "visit", args),
    }
    assert len(keys) == 3


def test_results_persist_across_instances(tmp_path: Path):
    path = tmp_path / "t.sqlite"
    lookup(ToolCache(path), search_args("paris", 10), {"hits": ["p"]})
    assert lookup(ToolCache(path), search_args("paris", 10)) == ({"hits": ["p"]}, True, 0)


def test_transient_results_are_not_stored(tmp_path: Path):
    cache = ToolCache(tmp_path / "t.sqlite")
    args = search_args("paris", 10)
    lookup(cache, args, {"error": "timeout"}, store=lambda v: "error" not in v)
    assert lookup(cache, args, {"hits": []}, store=lambda v: "error" not in v)[1:] == (False, 1)
    assert lookup(cache, args)[1:] == (True, 0)


@pytest.mark.parametrize(
    ("mode", "stores", "serves"), [("read_write", True, True), ("read_only", False, True), ("off", False, False)]
)
def test_modes(tmp_path: Path, mode: str, stores: bool, serves: bool):
    path = tmp_path / "t.sqlite"
    lookup(ToolCache(path), search_args("seeded", 10), {"hits": ["s"]})
    cache = ToolCache(path, mode)
    assert lookup(cache, search_args("seeded", 10))[1] is serves
    lookup(cache, search_args("new", 10), {"hits": ["n"]})
    assert lookup(ToolCache(path), search_args("new", 10))[1] is stores


def test_tool_cache_for_follows_the_llm_cache_mode_and_is_shared(tmp_path: Path):
    services = Services(cache_dir=tmp_path, settings={"llm": {"cache": {"mode": "read_only"}}})
    cache = tool_cache(services)
    assert cache.mode == "read_only" and cache is tool_cache(services)
    assert cache.store.path == tmp_path / TOOL_CACHE_FILE
    assert tool_cache(Services(cache_dir=tmp_path)).mode == "read_write"
