"""A runtime's batched calls over real HTTP: both wires, expiry, line failures, a server restart, the start-up check.

Each test runs :class:`cts.llm.LLMRuntime` with a batched role against a batch emulator on
127.0.0.1 and compares what the role gets with the live call of the same request.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from cts.compose.model_checks import batch_problems, spec_role
from cts.core.types import CallError
from cts.llm import LLMRuntime, ModelSpec
from cts.llm._rules import applied_params
from cts.llm.batch._ledger import Ledger, Route
from cts.llm.batch._wire import OpenAIWire
from cts.llm.sampling import salted, sampled_params
from tests.batch_emulators import AnthropicBatchEmulator, OpenAIBatchEmulator

MESSAGES = [
    {"role": "system", "content": "You ask clarification questions. Answer in JSON."},
    {"role": "user", "content": "Blurred query: Tell me about Mercury\nNumber of questions: 2\n"},
]
FAST = {"max_wait_s": 0.1, "poll_s": 0.05}


def spec(kind: str, base_url: str) -> ModelSpec:
    if kind == "openai":
        return ModelSpec(
            name="gpt",
            id="openai/gpt-4o",
            api_base=base_url,
            api_key_env="OPENAI_API_KEY",
            params={"temperature": 0, "max_tokens": 256},
            input_cost_per_token=2e-6,
            output_cost_per_token=8e-6,
            batch={"api": "openai", "input_cost_per_token": 1e-6, "output_cost_per_token": 4e-6},
        )
    return ModelSpec(
        name="claude",
        id="anthropic/claude-sonnet-4-5",
        api_base=base_url,
        api_key_env="ANTHROPIC_API_KEY",
        params={"temperature": 0, "max_tokens": 256},
        input_cost_per_token=3e-6,
        output_cost_per_token=1.5e-5,
        batch={"api": "anthropic", "input_cost_per_token": 1.5e-6, "output_cost_per_token": 7.5e-6},
    )


def runtime(tmp_path: Path, batched: bool, **batch: Any) -> LLMRuntime:
    settings = {"cache": {"mode": "off"}, "batch": {"roles": ["judge"] if batched else [], **FAST, **batch}}
    return LLMRuntime.from_settings(settings, tmp_path)


async def ask(rt: LLMRuntime, model: ModelSpec, *users: str) -> list[Any]:
    client = rt.client(model, "judge")
    calls = [client.complete([MESSAGES[0], {"role": "user", "content": u}]) for u in users]
    return await asyncio.gather(*calls, return_exceptions=True)


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")


USERS = [f"Blurred query: Tell me about Mercury {i}\nNumber of questions: 2\n" for i in range(3)]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_batched_call_gets_the_live_reply_at_the_batch_price(tmp_path: Path, kind: str) -> None:
    emulator_class = OpenAIBatchEmulator if kind == "openai" else AnthropicBatchEmulator
    with emulator_class(delay_s=0.2) as emulator:
        model = spec(kind, emulator.base_url)
        live = asyncio.run(ask(runtime(tmp_path, False), model, *USERS))
        rt = runtime(tmp_path, True)
        batched = asyncio.run(ask(rt, model, *USERS))
        assert emulator.live_posts == len(USERS)  # the live run's only
        assert [b.size for b in emulator.created_batches] == [3]
    for one, other in zip(live, batched, strict=True):
        assert (one.text, one.tokens_in, one.tokens_out, one.finish_reason) == (
            other.text,
            other.tokens_in,
            other.tokens_out,
            other.finish_reason,
        )
        assert other.cost_usd == pytest.approx(one.cost_usd / 2) and other.cost_usd > 0
    usage = rt.usage()["judge"]
    assert (
        usage["requests"] == 0
        and usage["calls"] == 3
        and usage["cost_usd"] == pytest.approx(sum(b.cost_usd for b in batched))
    )


def test_expired_lines_go_again_until_every_line_ran(tmp_path: Path) -> None:
    with OpenAIBatchEmulator(delay_s=0.1, expire=1) as emulator:  # each batch runs its first line only
        replies = asyncio.run(ask(runtime(tmp_path, True), spec("openai", emulator.base_url), *USERS))
        sizes = [b.size for b in emulator.created_batches]
    assert all(isinstance(r.text, str) and r.text for r in replies)
    assert sizes == [3, 2, 1]


def test_a_line_that_keeps_failing_is_an_infrastructure_failure_with_the_reason(tmp_path: Path) -> None:
    def bad(custom_id: str, body: Any) -> bool:
        return "Mercury 1" in str(body)

    with AnthropicBatchEmulator(delay_s=0.1, fail=bad) as emulator:
        replies = asyncio.run(
            ask(runtime(tmp_path, True, max_submissions=2), spec("anthropic", emulator.base_url), *USERS)
        )
        sizes = [b.size for b in emulator.created_batches]
    failed = replies[1]
    assert isinstance(failed, CallError) and failed.kind == "batch" and failed.infra  # not a result: a rerun sends it
    assert "after 2 batch submission(s)" in failed.message
    assert not isinstance(replies[0], Exception) and not isinstance(replies[2], Exception)
    assert sizes == [3, 1]


def test_polling_rides_out_a_provider_restart(tmp_path: Path) -> None:
    with OpenAIBatchEmulator(delay_s=1.0) as emulator:

        async def run() -> list[Any]:
            job = asyncio.ensure_future(ask(runtime(tmp_path, True), spec("openai", emulator.base_url), *USERS))
            while not emulator.created_batches:
                await asyncio.sleep(0.02)
            await asyncio.to_thread(emulator.restart, 1.0)  # down for a second while the batch runs
            return await job

        replies = asyncio.run(run())
        assert len(emulator.created_batches) == 1
    assert all(not isinstance(r, Exception) for r in replies), replies


def test_the_start_check_refuses_a_batched_role_without_a_batch_api() -> None:
    cfg = OmegaConf.create(
        {
            "services": {"llm": {"batch": {"roles": ["judge", "ua", "umpire"]}}},
            "judge": {"model": {"_target_": "cts.llm.ModelSpec", "name": "ernie", "id": "openai/ernie"}},
            "ua": {
                "model": {
                    "_target_": "cts.llm.ModelSpec",
                    "name": "gpt",
                    "id": "openai/gpt",
                    "batch": {"api": "openai"},
                }
            },
            "robustness": {"judges": {"g": {"model": {"_target_": "cts.llm.ModelSpec", "name": "ernie", "id": "x"}}}},
        }
    )
    problems = batch_problems(cfg)
    assert any("unknown role 'umpire'" in p for p in problems)
    assert any("judge.model (ernie) has no Batch API" in p for p in problems)
    assert any("robustness.judges.g.model (ernie)" in p for p in problems)
    assert not any("ua.model" in p for p in problems)
    only_robustness = batch_problems(cfg, ("robustness", "services"))
    assert [p for p in only_robustness if "Batch API" in p] == [
        p for p in problems if "robustness.judges" in p
    ]  # a model the task does not call is not checked


def test_the_start_check_sees_the_visit_summaries_on_the_agent_s_own_model() -> None:
    no_batch = {"_target_": "cts.llm.ModelSpec", "name": "qwen", "id": "openai/qwen"}
    batch = {**no_batch, "name": "gpt", "batch": {"api": "openai"}}
    agent = {"_target_": "cts.search.webdancer.WebDancerSearch", "model": no_batch}

    def problems(search: dict[str, object]) -> list[str]:
        roles = {"services": {"llm": {"batch": {"roles": ["visit_summary"]}}}}
        return batch_problems(OmegaConf.create({**roles, "search": search}), ("search", "services"))

    (own,) = problems(agent)  # no summary_model: the agent summarises its visits with its own model
    assert "has visit_summary, but search.model (qwen; the agent's own model, which summarises its visits" in own
    assert problems({**agent, "summary_model": batch}) == []  # a summariser of its own, with a Batch API
    assert problems({**agent, "summary_model": None, "model": batch}) == []
    assert len(problems({**agent, "summary_model": no_batch})) == 1  # its own summariser is checked, as before
    assert problems({**agent, "_target_": "cts.search.extractive.ExtractiveSearch"}) == []  # no visits to summarise


@pytest.mark.parametrize(
    ("path", "role"),
    [
        ("judge.members.a.model", "judge"),
        ("search.summary_model", "visit_summary"),
        ("search.model", "search"),
        ("robustness.judges.gpt.model", "judge"),
        ("robustness.backbones.ernie.ua.model", "ua"),
        ("robustness.backbones.ernie.rewriter.model", "rewriter"),
    ],
)
def test_each_model_spec_path_has_its_accounting_role(path: str, role: str) -> None:
    assert spec_role(path) == role


def test_a_batch_submitted_before_its_id_was_written_is_found_by_its_metadata(tmp_path: Path) -> None:

    with OpenAIBatchEmulator(delay_s=0.2) as emulator:
        model = spec("openai", emulator.base_url)
        rt = runtime(tmp_path, True, dir=str(tmp_path))
        key = rt.cache.key  # the key a call of USERS[0] has (cts.llm._runtime._complete)
        client = rt.client(model, "judge")
        messages = [MESSAGES[0], {"role": "user", "content": USERS[0]}]

        params = applied_params(model.request, sampled_params(dict(model.params)), None, messages).params
        cache_key = key(
            salted(
                {
                    "api_base": client.route.api_base,
                    "model": client.route.model,
                    "messages": messages,
                    "params": params,
                    "prompt_version": "",
                }
            )
        )
        route = Route("openai", model.api_base, model.id, (), 1e-6, 4e-6)
        body, _ = OpenAIWire().body(route, messages, params)
        Ledger(tmp_path).intend("crashed", route, (cache_key,))  # the process died after this line ...
        asyncio.run(
            OpenAIWire().submit(route, "sk-test", "crashed", [(cache_key, body)], "24h")
        )  # ... and this request
        (reply,) = asyncio.run(ask(rt, model, USERS[0]))
        assert len(emulator.created_batches) == 1  # found by its metadata, polled, not sent again
    assert not isinstance(reply, Exception) and reply.text
    assert Ledger(tmp_path).entries()["crashed"].ended == "completed"
