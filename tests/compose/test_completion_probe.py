"""The completion pre-flight (#17): one minimal completion per distinct request, before any job starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cts.compose.app import task_groups
from cts.compose.completion_probe import (
    PROBE_MESSAGES,
    PROBE_TOKENS,
    check_completions,
    completion_hints,
    completion_probes,
)
from cts.llm._rules import RequestRules
from tests.llm_server import Reply, ScriptedServer
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
UNSUPPORTED = (
    "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported."
)


def openai_reasoning_rules(body: dict[str, Any]) -> Reply | str:
    """OpenAI's documented rule for reasoning models (gpt-5, o-series): temperature only 1."""
    model = str(body.get("model", ""))
    if (model.startswith("gpt-5") or model.startswith("o")) and body.get("temperature", 1) != 1:
        error = {
            "message": UNSUPPORTED,
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
        return Reply(status=400, raw=json.dumps({"error": error}))
    return "OK"


def cap_of(body: dict[str, Any]) -> int:
    """The output cap of a request, under whichever field the model's provider takes."""
    return int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)


def jobs_of(*overrides: str) -> list[Any]:
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return [OmegaConf.masked_copy(cfg, list(task_groups(cfg)))]


def test_one_probe_per_distinct_request_with_a_tiny_cap(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        server.default = "OK"
        jobs = jobs_of(f"services.llm.api_base={server.base_url}")
        probes = completion_probes(jobs + jobs)  # the same job twice: still one probe per request
        problems, report = check_completions(jobs, tmp_path, done := set())
        again = check_completions(jobs, tmp_path, done)  # probed once per process
        bodies = [r.body for r in server.requests]
    # ernie plays four roles with one request shape; WebDancer's agent and summariser send two others
    assert [p.paths for p in probes] == [
        ("clarifier.model", "ua.model", "rewriter.model", "judge.model"),
        ("search.model",),
        ("search.summary_model",),
    ]
    assert problems == [] and len(bodies) == 3 and again == ([], "")
    # 8 tokens, plus the model's reasoning allowance where reasoning counts against the cap (WebDancer's <think>)
    assert sorted(cap_of(b) for b in bodies) == sorted(
        RequestRules.coerce(p.spec.get("request")).cap_for(PROBE_TOKENS) for p in probes
    )
    agent = next(b for b in bodies if "stop" in b)  # probes go out concurrently, in any order
    assert agent["temperature"] == 0.6 and agent["top_p"] == 0.95  # the agent's own sampling is probed
    assert report.startswith("cts pre-flight: 3 completion probe(s)")


def test_a_rejected_parameter_is_named_with_the_providers_message(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        server.handler = openai_reasoning_rules
        jobs = jobs_of(
            f"services.llm.api_base={server.base_url}",
            "clarifier=gpt",
            "++clarifier.model.params.temperature=0",
            "++clarifier.model.request={}",
        )
        failed, _ = check_completions(jobs, tmp_path, set())
    (result,) = failed
    problem = str(result.problem)
    assert problem.startswith("model gpt (openai/gpt-5.2), used by clarifier.model: ")
    assert "parameter `temperature`" in problem and "does not support 0 with this model" in problem
    assert result.cause == "rejected" and completion_hints(failed).startswith("Fix the model file")


def test_the_switch_turns_it_off(tmp_path: Path) -> None:
    jobs = jobs_of("services.llm.api_base=http://127.0.0.1:9/v1", "services.llm.preflight_completion=false")
    assert completion_probes(jobs) == []


@pytest.mark.slow
def test_a_gpt5_model_file_with_temperature_0_fails_before_anything_is_spent(tmp_path: Path, cache_dir: Path) -> None:
    """A user's own model file, without the registry's request rules: the provider's answer stops the run."""
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "mygpt.yaml").write_text(
        "_target_: cts.llm.ModelSpec\nname: mygpt\nid: openai/gpt-5-mini\napi_key_env: null\n"
        "params:\n  temperature: 0\n"
    )
    with ScriptedServer() as server:
        server.handler = openai_reasoning_rules
        start = time.monotonic()
        proc = run_script(
            [
                str(REPO / "run.py"),
                "-m",
                "clarifier=mygpt,ernie",
                "k=1",
                "limit=2",
                f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                f"services.llm.api_base={server.base_url}",
                f"hydra.sweep.dir={tmp_path / 'sweep'}",
                f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
                f"paths.cache_dir={cache_dir}",
            ],
            cwd=tmp_path,
            timeout=300,
            env={**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"},
        )
        elapsed = time.monotonic() - start
        sent = [r.body for r in server.requests]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "model mygpt (openai/gpt-5-mini), used by clarifier.model" in proc.stderr
    assert "parameter `temperature`" in proc.stderr and "does not support 0 with this model" in proc.stderr
    assert sent and all(b["messages"] == list(PROBE_MESSAGES) for b in sent)  # only probes went out
    assert not list((tmp_path / "sweep").rglob("records.jsonl")) and not (tmp_path / "mlflow.db").exists()
    assert elapsed < 60, elapsed  # loose: the bound is 10 s on an idle machine; see the note


FAST_RETRIES = (
    "services.llm.backoff.initial=0.01",
    "services.llm.backoff.max=0.02",
    "services.llm.backoff.jitter=0.01",
)


def preflight_message(tmp_path: Path, *overrides: str) -> str:
    """What the completion pre-flight of the job ``overrides`` compose says when it stops the launch."""
    from cts.compose.probes import probe_completions
    from cts.core.errors import PreflightFailed

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"paths.cache_dir={tmp_path}", *FAST_RETRIES, *overrides])
    with pytest.raises(PreflightFailed) as stopped:
        probe_completions([cfg])
    return str(stopped.value)


def test_a_server_error_is_retried_as_a_job_would_then_named_as_the_endpoints(tmp_path: Path) -> None:
    """#46: a 500 at the probe is the endpoint's failure, not the model file's."""
    with ScriptedServer() as server:
        server.default = Reply.error(500, "internal error")
        message = preflight_message(tmp_path, f"services.llm.api_base={server.base_url}", "services.llm.max_attempts=3")
        sent = len(server.requests)
    assert (
        sent == 3 * 3
    )  # three distinct probes (ernie, WebDancer's agent and summariser), each tried max_attempts times
    assert f"endpoint {server.base_url} failed (HTTP 500) for model ernie" in message
    assert "after 3 attempt(s)" in message and "internal error" in message
    assert "The endpoint failed, not the model file" in message and "Fix the model file" not in message


def test_a_server_error_that_passes_on_retry_does_not_stop_the_launch(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        server.default = "OK"
        server.script(Reply.error(503, "overloaded"))
        jobs = jobs_of(f"services.llm.api_base={server.base_url}", *FAST_RETRIES)
        failed, report = check_completions(jobs, tmp_path, set())
        sent = len(server.requests)
    assert failed == [] and sent == 4 and report.startswith("cts pre-flight: 3 completion probe(s)")


def test_a_timeout_is_the_endpoints_and_a_rejected_key_the_keys(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        server.default = Reply("OK", delay_s=1.0)
        slow = preflight_message(
            tmp_path, f"services.llm.api_base={server.base_url}", "services.llm.role_timeout_s.preflight=0.2"
        )
        server.default = Reply.error(401, "invalid api key")
        refused = preflight_message(tmp_path, f"services.llm.api_base={server.base_url}")
    assert f"endpoint {server.base_url} failed (timeout) for model ernie" in slow and "no answer within 0.2 s" in slow
    assert "The endpoint failed, not the model file" in slow and "Fix the model file" not in slow
    assert f"endpoint {server.base_url} failed (HTTP 401)" in refused and "Check the key" in refused
    assert "Fix the model file" not in refused
