"""LLM runtime against a real local HTTP server: retries, errors, limits, usage, spend limit."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cts.core.types import CallError, RequestRejected, SpendLimitReached
from cts.llm import LLMRuntime, ModelSpec, usage_scope
from tests.llm_server import Reply, ScriptedServer, llm_settings

SPEC = ModelSpec(
    name="gpt",
    id="openai/gpt-5.2",
    api_key_env="CTS_TEST_UNSET_KEY",
    params={"temperature": 0},
    input_cost_per_token=1e-3,
    output_cost_per_token=2e-3,
)
MESSAGES = [{"role": "user", "content": "Which year?"}]
SPEC_PRICE = {"input_cost_per_token": 1e-3, "output_cost_per_token": 2e-3}
"""SPEC's prices, set as the api_base price (the tests route every call to the local server)."""


def runtime(server: ScriptedServer, tmp_path: Path, **overrides: Any) -> LLMRuntime:
    return LLMRuntime.from_settings(llm_settings(server, **overrides), tmp_path)


@pytest.fixture(params=["litellm", "openai"])
def transport(request: pytest.FixtureRequest) -> str:
    """Both ways of sending (services.llm.transport) must behave the same."""
    return str(request.param)


def complete(rt: LLMRuntime, role: str = "clarifier", spec: ModelSpec = SPEC, messages: Any = None, **kw: Any) -> Any:
    return asyncio.run(rt.client(spec, role).complete(messages or MESSAGES, **kw))


def test_success_reports_tokens_cost_and_sends_spec_params(
    llm_server: ScriptedServer, tmp_path: Path, transport: str
) -> None:
    llm_server.script(Reply("two questions", tokens_in=10, tokens_out=5))
    result = complete(runtime(llm_server, tmp_path, transport=transport, api_base_price=SPEC_PRICE))
    assert (result.text, result.tokens_in, result.tokens_out, result.cached) == (
        "two questions",
        10,
        5,
        False,
    )
    assert result.cost_usd == pytest.approx(10 * 1e-3 + 5 * 2e-3)
    body = llm_server.requests[0].body
    assert body["model"] == "gpt-5.2"  # provider prefix dropped under the api_base override
    assert body["temperature"] == 0 and body["messages"] == MESSAGES


def test_reasoning_is_kept_apart_from_text(llm_server: ScriptedServer, tmp_path: Path, transport: str) -> None:
    llm_server.script("<think>plan first</think>\nParis.")
    result = complete(runtime(llm_server, tmp_path, transport=transport))
    assert (result.text.strip(), result.reasoning) == ("Paris.", "plan first")


def test_rate_limit_then_success(llm_server: ScriptedServer, tmp_path: Path, transport: str) -> None:
    llm_server.script(Reply.error(429), "fine")
    rt = runtime(llm_server, tmp_path, transport=transport)
    assert complete(rt).text == "fine"
    assert len(llm_server.requests) == 2
    assert rt.usage()["clarifier"]["requests"] == 2


def test_retry_after_is_honoured(llm_server: ScriptedServer, tmp_path: Path, transport: str) -> None:
    llm_server.script(Reply.error(429, retry_after=0.6), "fine")
    complete(runtime(llm_server, tmp_path, transport=transport))  # backoff alone would wait ~0.01 s
    first, second = llm_server.requests
    assert second.time - first.time >= 0.5


def test_retry_after_is_bounded(llm_server: ScriptedServer, tmp_path: Path) -> None:
    llm_server.script(Reply.error(503, retry_after=3600), "fine")
    backoff = {"initial": 0.01, "max": 0.05, "jitter": 0.0, "max_retry_after": 0.1}
    assert complete(runtime(llm_server, tmp_path, backoff=backoff)).text == "fine"
    first, second = llm_server.requests
    assert second.time - first.time < 30


def test_server_errors_until_attempts_run_out(llm_server: ScriptedServer, tmp_path: Path, transport: str) -> None:
    llm_server.default = Reply.error(500)
    rt = runtime(llm_server, tmp_path, transport=transport, max_attempts=3)
    with pytest.raises(CallError) as err:
        complete(rt)
    assert err.value.kind == "server_error"
    assert len(llm_server.requests) == 3
    assert rt.usage()["clarifier"]["errors"] == 1


def test_bad_request_is_not_retried(llm_server: ScriptedServer, tmp_path: Path, transport: str) -> None:
    body = '{"error": {"message": "Unsupported value: \'temperature\' does not support 0 with this model.", "type": "invalid_request_error", "param": "temperature", "code": "unsupported_value"}}'
    llm_server.default = Reply(status=400, raw=body)
    rt = runtime(llm_server, tmp_path, transport=transport, max_attempts=5)
    with pytest.raises(RequestRejected) as err:
        complete(rt)
    assert err.value.kind == "request_rejected" and err.value.role == "clarifier"
    assert "parameter `temperature`" in str(err.value) and "does not support 0" in str(err.value)
    assert len(llm_server.requests) == 1
    with pytest.raises(RequestRejected):  # the same model in the same role: refused without a request
        complete(rt, messages=[{"role": "user", "content": "another"}])
    assert len(llm_server.requests) == 1
    llm_server.default = Reply("fine")
    complete(rt, role="judge", messages=[{"role": "user", "content": "a third"}])  # another role still sends
    assert len(llm_server.requests) == 2


def test_timeout_is_retried_then_fails(llm_server: ScriptedServer, tmp_path: Path, transport: str) -> None:
    llm_server.default = Reply("late", delay_s=1.5)
    with pytest.raises(CallError) as err:
        complete(runtime(llm_server, tmp_path, transport=transport, timeout_s=0.2, max_attempts=2))
    assert err.value.kind == "timeout"
    assert len(llm_server.requests) == 2


def test_connection_error(tmp_path: Path, transport: str) -> None:
    with ScriptedServer() as server:
        settings = llm_settings(server, max_attempts=2, transport=transport)
    rt = LLMRuntime.from_settings(settings, tmp_path)  # the server is gone: nothing listens
    with pytest.raises(CallError) as err:
        complete(rt)
    assert err.value.kind == "connection"


def test_malformed_http_body_is_a_server_error(llm_server: ScriptedServer, tmp_path: Path, transport: str) -> None:
    llm_server.script(Reply(raw='{"choices": ['), "fine")
    assert complete(runtime(llm_server, tmp_path, transport=transport)).text == "fine"
    assert len(llm_server.requests) == 2


def test_model_own_api_base_and_key_variable(
    llm_server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = runtime(llm_server, tmp_path, api_base=None)
    spec = ModelSpec("local", "openai/served-name", api_base=llm_server.base_url, api_key_env="CTS_TEST_KEY")
    monkeypatch.delenv("CTS_TEST_KEY", raising=False)
    with pytest.raises(CallError) as err:
        complete(rt, spec=spec)
    assert err.value.kind == "auth" and "CTS_TEST_KEY" in err.value.message
    assert llm_server.requests == []  # refused before sending
    monkeypatch.setenv("CTS_TEST_KEY", "secret-123")
    assert complete(rt, spec=spec).text == "ok"
    assert llm_server.requests[0].body["model"] == "served-name"
    assert llm_server.requests[0].headers.get("authorization") == "Bearer secret-123"


def test_served_name_override(llm_server: ScriptedServer, tmp_path: Path) -> None:
    complete(runtime(llm_server, tmp_path, served_name="Qwen/Qwen3-8B"))
    assert llm_server.requests[0].body["model"] == "Qwen/Qwen3-8B"


def test_concurrency_is_capped_per_endpoint(llm_server: ScriptedServer, tmp_path: Path, transport: str) -> None:
    lock, state = threading.Lock(), {"now": 0, "peak": 0}

    def slow(body: Any) -> str:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.1)
        with lock:
            state["now"] -= 1
        return "ok"

    llm_server.handler = slow
    rt = runtime(llm_server, tmp_path, transport=transport, concurrency_per_endpoint=2)

    async def many() -> None:
        client = rt.client(SPEC, "ua")
        await asyncio.gather(*(client.complete([{"role": "user", "content": str(i)}]) for i in range(6)))

    asyncio.run(many())
    assert len(llm_server.requests) == 6
    assert state["peak"] == 2


def test_usage_scope_attribution_across_concurrent_tasks(llm_server: ScriptedServer, tmp_path: Path) -> None:
    llm_server.handler = lambda body: Reply("ok", tokens_in=3, tokens_out=1, delay_s=0.02)
    rt = runtime(llm_server, tmp_path)
    clarifier, ua = rt.client(SPEC, "clarifier"), rt.client(SPEC, "ua")

    async def instance(n_ua: int) -> dict:
        with usage_scope() as usage:
            await clarifier.complete(MESSAGES)
            # nested tasks inherit the scope through the context
            await asyncio.gather(*(ua.complete([{"role": "user", "content": f"{n_ua}-{i}"}]) for i in range(n_ua)))
            return usage

    async def both() -> list[dict]:
        return await asyncio.gather(instance(1), instance(3))

    small, large = asyncio.run(both())
    assert small["clarifier"]["calls"] == 1 and small["ua"]["calls"] == 1
    assert large["clarifier"]["calls"] == 1 and large["ua"]["calls"] == 3
    assert large["ua"]["tokens_in"] == 9
    job = rt.usage()
    assert job["ua"]["calls"] == 4 and job["clarifier"]["calls"] == 2
    assert job["ua"]["cost_usd"] == pytest.approx(small["ua"]["cost_usd"] + large["ua"]["cost_usd"])


def test_the_spend_limit_stops_before_sending(llm_server: ScriptedServer, tmp_path: Path) -> None:
    llm_server.default = Reply("ok", tokens_in=10, tokens_out=0)  # 0.01 USD per call
    rt = runtime(llm_server, tmp_path, spend={"max_usd": 0.015}, api_base_price=SPEC_PRICE)
    complete(rt)
    complete(rt, prompt_version="b")
    with pytest.raises(SpendLimitReached):
        complete(rt, prompt_version="c")
    assert len(llm_server.requests) == 2
    assert rt.spent_usd == pytest.approx(0.02)


def test_runtime_works_across_event_loops(llm_server: ScriptedServer, tmp_path: Path, transport: str) -> None:
    rt = runtime(llm_server, tmp_path, transport=transport, concurrency_per_endpoint=1)
    for _ in range(2):  # a job may call asyncio.run more than once
        assert complete(rt).text == "ok"


def test_listener_sees_every_call(llm_server: ScriptedServer, tmp_path: Path) -> None:
    rt = runtime(llm_server, tmp_path)
    events: list[Any] = []
    rt.add_listener(events.append)
    complete(rt, role="judge", prompt_version="v1")
    (event,) = events
    assert (event.role, event.spec_name, event.prompt_version, event.text, event.error) == (
        "judge",
        "gpt",
        "v1",
        "ok",
        None,
    )


def test_unknown_settings_key_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_atempts"):
        LLMRuntime.from_settings({"max_atempts": 3}, tmp_path)


def test_default_settings_file_parses(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir

    conf = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("config", overrides=["services.llm.api_base=http://127.0.0.1:9/v1"])
    rt = LLMRuntime.from_settings(cfg.services.llm, tmp_path)
    assert rt.settings.api_base == "http://127.0.0.1:9/v1" and rt.settings.transport == "openai"
    assert rt.cache.mode == "read_write" and rt.cache.path == tmp_path / "llm_cache.sqlite"
    assert rt.settings.max_reasks == 2 and rt.settings.max_usd is None


def test_own_server_costs_zero_unless_priced(llm_server: ScriptedServer, tmp_path: Path, transport: str) -> None:
    """services.llm.api_base is the user's server: the registry's hosted prices do not apply."""
    llm_server.default = Reply("ok", tokens_in=10, tokens_out=5)
    free = complete(runtime(llm_server, tmp_path, transport=transport))
    assert (free.tokens_in, free.tokens_out, free.cost_usd) == (10, 5, 0.0)
    price = {"input_cost_per_token": 1e-6, "output_cost_per_token": 3e-6}
    priced = complete(runtime(llm_server, tmp_path, transport=transport, api_base_price=price))
    assert priced.cost_usd == pytest.approx(10 * 1e-6 + 5 * 3e-6)


def test_a_model_with_its_own_endpoint_keeps_its_registry_prices(llm_server: ScriptedServer, tmp_path: Path) -> None:
    llm_server.default = Reply("ok", tokens_in=10, tokens_out=5)
    spec = ModelSpec(
        "local", "openai/served", api_base=llm_server.base_url, input_cost_per_token=1e-3, output_cost_per_token=2e-3
    )
    assert complete(runtime(llm_server, tmp_path, api_base=None), spec=spec).cost_usd == pytest.approx(0.02)


def test_earlier_spend_counts_against_the_cap(llm_server: ScriptedServer, tmp_path: Path) -> None:
    llm_server.default = Reply("ok", tokens_in=10, tokens_out=0)  # 0.01 USD per call
    rt = runtime(llm_server, tmp_path, spend={"max_usd": 0.05}, api_base_price=SPEC_PRICE)
    rt.count_prior_spend(0.045)
    complete(rt)
    with pytest.raises(SpendLimitReached, match="0.0450 by earlier runs"):
        complete(rt, prompt_version="b")
    assert len(llm_server.requests) == 1


def test_calls_in_flight_when_their_caller_is_cancelled_are_booked(tmp_path: Path) -> None:
    """The spend-limit stop cancels instances; their requests are already paid, so they are counted."""
    from cts.llm import settled
    from tests.llm_fakes import ScriptedServer as Server

    with Server(latency_s=0.3) as server:
        server.default = Reply("ok", tokens_in=10, tokens_out=5)  # 0.02 USD per call
        rt = runtime(server, tmp_path, api_base_price=SPEC_PRICE)

        async def job() -> dict:
            with usage_scope() as usage:
                calls = [
                    asyncio.ensure_future(rt.client(SPEC, "judge").complete(MESSAGES, prompt_version=str(i)))
                    for i in range(3)
                ]
                while len(server.requests) < 3:  # all three on the wire (polled: a loaded machine is slow)
                    await asyncio.sleep(0.01)
                for c in calls:
                    c.cancel()
                await asyncio.gather(*calls, return_exceptions=True)
            return usage

        usage = asyncio.run(settled(job(), timeout_s=5))
    assert len(server.requests) == 3
    assert rt.spent_usd == pytest.approx(3 * 0.02)
    assert usage["judge"]["calls"] == 3 and usage["judge"]["tokens_in"] == 30
    assert usage["judge"]["cost_usd"] == pytest.approx(0.06) and rt.usage()["judge"]["calls"] == 3


def test_the_spend_node_reads_under_its_old_name_budget() -> None:
    from cts.llm import LLMSettings

    assert LLMSettings.from_mapping({"spend": {"max_usd": 2.0}}).max_usd == 2.0
    # a job dir's .hydra/config.yaml written before the rename (read by python -m cts.plan)
    assert LLMSettings.from_mapping({"budget": {"max_usd": 3.0, "allow_over_forecast": False}}).max_usd == 3.0
