"""Response cache: modes, keys, parallel processes, and served hits with no HTTP request."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from cts.llm import LLMRuntime, ModelSpec, ResponseCache
from tests.llm_server import ScriptedServer, llm_settings

SPEC = ModelSpec(
    "ernie",
    "openai/ernie-4.5-turbo-128k",
    params={"temperature": 0},
    input_cost_per_token=1e-3,
    output_cost_per_token=1e-3,
)
MESSAGES = [{"role": "user", "content": "Which region? 哪个地区？"}]


def call(rt: LLMRuntime, role: str = "ua", **kw: Any) -> Any:
    return asyncio.run(rt.client(SPEC, role).complete(MESSAGES, **kw))


def cached_runtime(server: ScriptedServer, path: Path, mode: str) -> LLMRuntime:
    return LLMRuntime.from_settings(
        # priced like SPEC (the local server counts as the user's own: free unless priced)
        llm_settings(
            server,
            cache={"mode": mode, "path": str(path)},
            api_base_price={"input_cost_per_token": 1e-3, "output_cost_per_token": 1e-3},
        ),
        path.parent,
    )


def test_key_is_canonical_json() -> None:
    assert ResponseCache.key({"a": 1, "b": [1, "x"]}) == ResponseCache.key({"b": [1, "x"], "a": 1})
    assert ResponseCache.key({"a": 1}) != ResponseCache.key({"a": 2})
    assert len(ResponseCache.key("中文")) == 64


def test_put_get_round_trip_and_modes(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    ResponseCache(path).put("k", {"text": "答案", "n": 1})
    assert ResponseCache(path).get("k") == {"text": "答案", "n": 1}
    assert ResponseCache(path, "read_only").get("k") == {"text": "答案", "n": 1}
    ResponseCache(path, "read_only").put("k2", {"x": 1})
    assert ResponseCache(path).get("k2") is None
    assert ResponseCache(path, "off").get("k") is None
    assert ResponseCache(tmp_path / "missing.sqlite", "read_only").get("k") is None
    with pytest.raises(ValueError):
        ResponseCache(path, "sometimes")  # type: ignore[arg-type]


def test_read_write_serves_hit_with_no_request(llm_server: ScriptedServer, tmp_path: Path) -> None:
    llm_server.default = "<think>the intent says Europe</think>Europe"
    path = tmp_path / "cache.sqlite"
    first = call(cached_runtime(llm_server, path, "read_write"))
    rt = cached_runtime(llm_server, path, "read_write")  # a rerun of the job
    second = call(rt)
    assert len(llm_server.requests) == 1
    assert (second.text, second.cached, second.cost_usd) == ("Europe", True, 0.0)
    assert (second.tokens_in, second.tokens_out) == (first.tokens_in, first.tokens_out)
    assert second.reasoning == first.reasoning == "the intent says Europe"
    usage = rt.usage()["ua"]
    assert (usage["calls"], usage["cache_hits"], usage["requests"], usage["cost_usd"]) == (1, 1, 0, 0.0)
    assert usage["saved_usd"] == pytest.approx(first.cost_usd) and first.cost_usd > 0


def test_key_covers_params_prompt_version_and_endpoint(llm_server: ScriptedServer, tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    rt = cached_runtime(llm_server, path, "read_write")
    call(rt)
    call(rt, prompt_version="v2")
    call(rt, temperature=0.7)
    call(rt)  # identical to the first: a hit
    assert len(llm_server.requests) == 3
    with ScriptedServer() as other:  # same model and messages, another api_base: a miss
        call(cached_runtime(other, path, "read_write"))
        assert len(other.requests) == 1


def test_read_only_serves_but_never_stores(llm_server: ScriptedServer, tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    call(cached_runtime(llm_server, path, "read_write"))
    reader = cached_runtime(llm_server, path, "read_only")
    assert call(reader).cached
    call(reader, prompt_version="new")
    call(reader, prompt_version="new")
    assert len(llm_server.requests) == 3  # the miss was not stored


def test_off_never_serves_and_creates_no_file(llm_server: ScriptedServer, tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    rt = cached_runtime(llm_server, path, "off")
    call(rt)
    call(rt)
    assert len(llm_server.requests) == 2
    assert not path.exists()


def test_default_path_is_under_cache_dir(llm_server: ScriptedServer, tmp_path: Path) -> None:
    rt = LLMRuntime.from_settings(llm_settings(llm_server, cache={"mode": "read_write", "path": None}), tmp_path)
    call(rt)
    assert (tmp_path / "llm_cache.sqlite").exists()


_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from cts.llm.cache import ResponseCache
    cache = ResponseCache(Path(sys.argv[1]))
    for i in range(int(sys.argv[3])):
        cache.put(f"{sys.argv[2]}-{i}", {"i": i, "who": sys.argv[2]})
        cache.get(f"{sys.argv[2]}-{i // 2}")
    """
)


def test_parallel_processes_share_the_cache(tmp_path: Path) -> None:
    path, n = tmp_path / "shared.sqlite", 150
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), who, str(n)], stderr=subprocess.PIPE, text=True)
        for who in ("a", "b", "c")
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    cache = ResponseCache(path)
    assert len(cache) == 3 * n
    assert cache.get("b-149") == {"i": 149, "who": "b"}
