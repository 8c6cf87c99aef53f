"""Every call carries its role's output cap; a reply cut at the cap is never parsed as complete (#17).

A cut reply is re-asked within the bounded re-asks, then the item is unscored with the
kind ``truncated``; truncations and reasoning tokens are counted per role.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cts.compose.completion_probe import PROBE_MESSAGES
from cts.llm import Completion
from cts.llm._rules import RequestRules, request_params
from cts.roles.llm import (
    LLMClarifier,
    LLMExtractor,
    LLMJudge,
    LLMRewriter,
    LLMUserAnswerer,
)
from cts.roles.reask import Asking, InvalidOutput, Truncated, ask_until_valid
from hydra_plugins.cts_model_roles.cts_model_roles import ROLES
from tests.llm_server import Reply, ScriptedServer
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
CAP_FIELDS = ("max_tokens", "max_completion_tokens")


def test_request_params_send_the_cap_under_the_providers_field() -> None:
    plain = RequestRules()
    assert request_params(plain, {"temperature": 0}, 128) == {"temperature": 0, "max_tokens": 128}
    assert request_params(plain, {"temperature": 0}, None) == {"temperature": 0}
    reasoning = RequestRules(cap_param="max_completion_tokens", cap_includes_reasoning=True, reasoning_allowance=1000)
    assert request_params(reasoning, {"reasoning_effort": "low"}, 128) == {
        "reasoning_effort": "low",
        "max_completion_tokens": 1128,
    }
    # a cap already in the model's params is kept when smaller, and renamed to the provider's field
    assert request_params(reasoning, {"max_tokens": 64}, 128) == {"max_completion_tokens": 64}
    assert request_params(plain, {"max_tokens": 4096}, 128) == {"max_tokens": 128}


def test_registry_role_caps_match_the_role_classes() -> None:
    classes = {
        "clarifier": LLMClarifier,
        "ua": LLMUserAnswerer,
        "rewriter": LLMRewriter,
        "judge": LLMJudge,
        "extractor": LLMExtractor,
    }
    assert {g: node["max_output_tokens"] for g, node in ROLES.items()} == {
        g: cls.default_cap for g, cls in classes.items()
    }


class Cutting:
    """A chat client whose first ``n_cut`` replies stop at the cap."""

    def __init__(self, n_cut: int, final: str = '["Which one?"]') -> None:
        self.n_cut, self.final, self.calls = n_cut, final, []

    async def complete(self, messages: list[dict[str, str]], **kw: Any) -> Completion:
        self.calls.append((messages, kw))
        if len(self.calls) <= self.n_cut:
            return Completion('["Which one of the', 5, 16, 0.0, False, 0.0, finish_reason="length")
        return Completion(self.final, 5, 4, 0.0, False, 0.0, finish_reason="stop")


def ask(client: Cutting, max_reasks: int = 2) -> Any:
    def parse(text: str) -> list[str]:
        try:
            return json.loads(text)
        except ValueError as e:
            raise InvalidOutput("not JSON") from e

    return asyncio.run(
        ask_until_valid(
            client,
            [{"role": "user", "content": "q"}],
            parse,
            Asking(max_reasks, "v", max_output_tokens=16),
        )
    )


def test_a_cut_reply_is_re_asked_not_parsed() -> None:
    client = Cutting(n_cut=1)
    assert ask(client) == ["Which one?"]
    (_, first), (second_messages, _) = client.calls[0], client.calls[1]
    assert first["max_output_tokens"] == 16
    assert "cut off at the length limit of 16 tokens" in second_messages[-1]["content"]


def test_replies_cut_every_time_raise_truncated_after_the_re_asks() -> None:
    client = Cutting(n_cut=10)
    with pytest.raises(Truncated):
        ask(client, max_reasks=2)
    assert len(client.calls) == 3


def never_stops(body: dict[str, Any]) -> Reply:
    """A model that never stops by itself: it writes until the request's cap (or a full 8k context)."""
    caps = [int(body[f]) for f in CAP_FIELDS if body.get(f) is not None]
    n = min(caps) if caps else 8192
    return Reply(" ".join(["more"] * n), tokens_out=n, finish_reason="length")


@pytest.mark.slow
def test_a_model_that_never_stops_ends_every_call_at_its_roles_cap(tmp_path: Path, cache_dir: Path) -> None:
    with ScriptedServer() as server:
        server.handler = never_stops
        job = tmp_path / "job"
        proc = run_script(
            [
                str(REPO / "run.py"),
                "clarifier=ernie",
                "ua=ernie",
                "rewriter=ernie",
                "judge=ernie",
                "judge_anchors.check=false",  # a scripted judge: the anchor check (docs/judges.md) would refuse it before the run
                "limit=3",
                "search.max_llm_calls=4",
                f"services.llm.api_base={server.base_url}",
                "services.llm.backoff.initial=0.01",
                "services.llm.max_reasks=1",
                f"hydra.run.dir={job}",
                f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
                f"paths.cache_dir={cache_dir}",
            ],
            cwd=tmp_path,
            timeout=600,
            env={**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"},
        )
        bodies = [r.body for r in server.requests if r.body["messages"] != list(PROBE_MESSAGES)]
    assert proc.returncode == 3, proc.stderr[-3000:]  # every arm truncated: it measured no score (min_scored)
    assert bodies and all(any(b.get(f) for f in CAP_FIELDS) for b in bodies), "a request went out uncapped"
    caps = {b.get("max_tokens") or b.get("max_completion_tokens") for b in bodies}
    # the clarifier's cap, and a WebDancer turn's 4096 plus the model's 8192 of <think> allowance; nothing uncapped
    assert caps == {512, 4096 + 8192}
    records = [json.loads(x) for x in (job / "records.jsonl").read_text().splitlines()]
    assert len(records) == 3
    for r in records:  # the clarifier's replies were cut twice (one re-ask): unscored as truncated, never parsed
        assert r["error"]["kind"] == "truncated" and r["error"]["stage"] == "clarify"
        assert r["orig"]["score"] is None and r["orig"]["error"]["kind"] == "truncated"
    metrics = json.loads((job / "summary.json").read_text())["metrics"]
    assert metrics["truncated_clarifier"] == 3 * 2 and metrics["n_unscored"] == 3
    # max_truncated_turns=2: the third cut turn in a row ends each orig search
    assert metrics["truncated_search"] == 3 * 3
    assert len(bodies) == 3 * 2 + 3 * 3  # bounded: nothing else was sent


@pytest.mark.parametrize("transport", ["openai", "litellm"])
def test_reasoning_tokens_are_counted_per_role_and_priced_as_output(tmp_path: Path, transport: str) -> None:
    from cts.llm import LLMRuntime, ModelSpec, usage_scope
    from tests.llm_server import llm_settings

    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "unknown"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 70,
            "total_tokens": 80,
            "completion_tokens_details": {"reasoning_tokens": 64},
        },
    }
    with ScriptedServer() as server:
        server.default = Reply(raw=json.dumps(body))
        settings = llm_settings(
            server, transport=transport, api_base_price={"input_cost_per_token": 1e-3, "output_cost_per_token": 2e-3}
        )
        rt = LLMRuntime.from_settings(settings, tmp_path)
        spec = ModelSpec(
            "r",
            "openai/r",
            request={"cap_param": "max_completion_tokens", "cap_includes_reasoning": True, "reasoning_allowance": 1000},
        )

        async def go() -> tuple[Completion, Any]:
            with usage_scope() as usage:
                done = await rt.client(spec, "ua").complete([{"role": "user", "content": "q"}], max_output_tokens=128)
            return done, usage

        done, usage = asyncio.run(go())
        (sent,) = [r.body for r in server.requests]
    assert sent["max_completion_tokens"] == 1128 and "max_tokens" not in sent
    assert done.tokens_reasoning == 64 and done.tokens_out == 70 and not done.truncated
    assert done.cost_usd == pytest.approx(10 * 1e-3 + 70 * 2e-3)  # reasoning is inside completion_tokens
    assert usage["ua"]["tokens_reasoning"] == 64 and usage["ua"]["truncated"] == 0
