"""A 5xx, a timeout or an expired line is never stored: not as a reply, not as a rejection.

Every path that stores an outcome in the response cache is driven over real HTTP with the
cache on: the live send (a 5xx or a timeout after the last retry) and the batched send (lines
that fail with 500, 504 or 408, or expire, in every sending). The call fails as infrastructure
(:attr:`cts.core.types.CallError.infra`), nothing is cached for it, and the next run against
the healthy server sends exactly the failed requests, once each (counted at the server).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cts.core.types import CallError
from cts.llm import LLMRuntime, ModelSpec
from cts.llm.cache import ResponseCache
from tests.batch_emulators import EXPIRED, AnthropicBatchEmulator, OpenAIBatchEmulator
from tests.llm_server import Reply, ScriptedServer, llm_settings

SYSTEM = {"role": "system", "content": "You judge answers. Answer in JSON."}
USERS = [f"候选答案 {i}: Mercury {i}" for i in range(6)]  # CJK in every request
FAULTS: dict[str, int | str] = {"Mercury 1": 500, "Mercury 2": 504, "Mercury 3": EXPIRED, "Mercury 4": 408}


def batch_fault(custom_id: str, body: Any) -> int | str | None:
    text = json.dumps(body, ensure_ascii=False)
    return next((fault for marker, fault in FAULTS.items() if marker in text), None)


def batch_spec(kind: str, base_url: str) -> ModelSpec:
    provider = {"openai": "openai/gpt-4o", "anthropic": "anthropic/claude-sonnet-4-5"}[kind]
    return ModelSpec(
        name=kind,
        id=provider,
        api_base=base_url,
        api_key_env="OPENAI_API_KEY" if kind == "openai" else "ANTHROPIC_API_KEY",
        params={"temperature": 0, "max_tokens": 256},
        input_cost_per_token=2e-6,
        output_cost_per_token=8e-6,
        batch={"api": kind, "input_cost_per_token": 1e-6, "output_cost_per_token": 4e-6},
    )


def batched_runtime(tmp_path: Path) -> LLMRuntime:
    """A new process's runtime on the same cache file, its judge batched (each request sent at most twice)."""
    batch = {"roles": ["judge"], "max_wait_s": 0.1, "poll_s": 0.05, "max_submissions": 2}
    return LLMRuntime.from_settings({"cache": {"mode": "read_write"}, "batch": batch}, tmp_path)


def ask(rt: LLMRuntime, model: ModelSpec) -> list[Any]:
    async def run() -> list[Any]:
        client = rt.client(model, "judge")
        calls = [client.complete([SYSTEM, {"role": "user", "content": u}]) for u in USERS]
        return await asyncio.gather(*calls, return_exceptions=True)

    return asyncio.run(run())


def lines(emulator: Any, since: int = 0) -> list[str]:
    return [cid for b in emulator.created_batches[since:] for cid in b.custom_ids]


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_failed_batch_lines_are_infrastructure_never_cached_and_retried_exactly(tmp_path: Path, kind: str) -> None:
    emulator_class = OpenAIBatchEmulator if kind == "openai" else AnthropicBatchEmulator
    with emulator_class(delay_s=0.05, fault=batch_fault) as emulator:
        model = batch_spec(kind, emulator.base_url)
        first = ask(batched_runtime(tmp_path), model)
        sent_first = lines(emulator)
        failed = {cid for job in emulator.jobs.values() for cid, body in job.lines if batch_fault(cid, body)}
        kept = [ResponseCache(tmp_path / "llm_cache.sqlite").get(cid) for cid in sorted(failed)]
        emulator.fault = None  # the provider is healthy again
        n_batches = len(emulator.created_batches)
        second = ask(batched_runtime(tmp_path), model)
        retried = lines(emulator, n_batches)
        n_batches = len(emulator.created_batches)
        third = ask(batched_runtime(tmp_path), model)
        assert len(emulator.created_batches) == n_batches  # everything is cached now
    errors = [r for r in first if isinstance(r, Exception)]
    assert [isinstance(r, CallError) for r in first] == [False, True, True, True, True, False], first
    assert all(e.kind == "batch" and e.infra for e in errors if isinstance(e, CallError))
    assert "after 2 batch submission(s)" in str(errors[0])
    assert len(failed) == 4 and kept == [None] * 4  # nothing stored for them
    assert sorted(retried) == sorted(failed) and len(sent_first) == 2 + 2 * 4  # each failed line sent twice, then once
    assert all(not isinstance(r, Exception) for r in second + third) and [r.cached for r in third] == [True] * 6
    assert [r.text for r in third] == [r.text for r in second]


@pytest.mark.parametrize(
    "failure", [Reply.error(500), Reply.error(503), Reply("late", delay_s=1.0)], ids=["500", "503", "timeout"]
)
def test_a_live_call_failed_after_its_retries_is_not_cached_and_a_rerun_sends_it_once(
    llm_server: ScriptedServer, tmp_path: Path, failure: Reply
) -> None:
    settings = llm_settings(llm_server, tmp_path, max_attempts=2, max_timeout_attempts=2, timeout_s=0.3)
    spec = ModelSpec(name="gpt", id="openai/gpt-5.2", params={"temperature": 0})

    def complete() -> Any:
        rt = LLMRuntime.from_settings(settings, tmp_path)  # a new run on the same cache
        return asyncio.run(rt.client(spec, "judge").complete([SYSTEM, {"role": "user", "content": USERS[0]}]))

    llm_server.default = failure
    with pytest.raises(CallError) as err:
        complete()
    assert err.value.infra and err.value.kind in ("server_error", "timeout")
    assert len(llm_server.requests) == 2  # every attempt spent
    llm_server.default = Reply("全部 covered")
    assert complete().text == "全部 covered" and len(llm_server.requests) == 3  # the rerun sends it, once
    assert complete().cached and len(llm_server.requests) == 3  # and keeps the reply
