"""Infrastructure failures stop gold building and the robustness analyses cleanly.

A failing endpoint (500s after the retries), a refused connection (the circuit
breaker opens) or the spend limit is not an item's failure: the task stops at once with
one line and exit status 1, writes no archive or tables, and its MLflow run ends
FAILED with the tag ``stop_reason``. Everything goes over HTTP to the local scripted
server (tests/llm_fakes.py) or to a port nobody listens on.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from cts import tracking
from cts.compose.app import build_services, run, run_configured_task
from cts.core.errors import exit_on_error
from cts.core.records import infra_stop
from cts.core.types import (
    CallError,
    CircuitOpen,
    GoldDraft,
    Instance,
    SearchResult,
    SpendLimitReached,
    UnscoredError,
)
from cts.data.jsonl import write_instances_jsonl
from cts.demo import load_demo
from cts.gold import build_gold
from tests.analysis.fakes import compose_task, stability_sweep
from tests.llm_fakes import Reply
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
FAST_RETRIES = (
    "services.llm.max_attempts=2",
    "services.llm.backoff.initial=0.01",
    "services.llm.backoff.max=0.01",
    "services.llm.backoff.jitter=0",
    "services.llm.breaker_failures=2",
)


def dead_base_url() -> str:
    """An http URL on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def the_task_run(uri: str) -> Any:
    runs = tracking.search_runs(uri)
    assert len(runs) == 1, runs
    return runs.iloc[0]


def stopped(call: Any) -> str:
    """Run ``call`` as an entry point does; assert it exits with status 1 and one line; return the line."""
    with pytest.raises(SystemExit) as stop, exit_on_error():
        call()
    message = str(stop.value.code)
    assert stop.value.code not in (0, None) and len(message.splitlines()) == 1, message
    assert "stopped by an infrastructure failure" in message and "Traceback" not in message
    return message


# ------------------------------------------------------------------ the rule


def test_infra_stop_separates_the_infrastructure_from_the_item() -> None:
    assert infra_stop(SpendLimitReached("cap")) and infra_stop(CircuitOpen("http://h/v1", 20, "connection: refused"))
    assert infra_stop(CallError("server_error", "500")) and infra_stop(CallError("connection", "refused"))
    assert infra_stop(type("DatabaseError", (Exception,), {})("file is not a database"))
    assert infra_stop(CallError("bad_request", "400"))  # a rejected request is a configuration failure
    assert not infra_stop(CallError("client_error", "409")) and not infra_stop(UnscoredError("two lines"))
    assert not infra_stop(RuntimeError("judge down")) and not infra_stop(ValueError("x"))
    assert infra_stop(OSError(28, "No space left on device")) and not infra_stop(FileExistsError("archive exists"))


class _Search:
    def __init__(self, trace_kind: str | None = None) -> None:
        self.trace_kind = trace_kind

    async def search(self, query: str) -> SearchResult:
        if self.trace_kind is None:
            return SearchResult(answer="a", evidence=())
        event = {"type": "error", "kind": self.trace_kind, "message": "boom", "endpoint": "http://h:1/v1"}
        return SearchResult(answer="", end_reason="error", trace=(event,))


class _Extractor:
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def extract(self, fused_query: str, answer: str, evidence: Any) -> GoldDraft:
        raise self.error


def test_gold_build_stops_on_the_infrastructure_and_reports_item_failures() -> None:
    inst = [Instance("a", "q", "intent a"), Instance("b", "q", "intent b")]
    for error in (
        CircuitOpen("http://h:1/v1", 2, "connection: refused"),
        CallError("server_error", "500"),
        SpendLimitReached("cap"),
    ):
        with pytest.raises(type(error)):
            asyncio.run(build_gold(inst, _Search(), _Extractor(error), provenance={}))
    with pytest.raises(CallError, match="connection: boom") as e:  # a search run ended by a dead endpoint
        asyncio.run(build_gold(inst, _Search("connection"), _Extractor(ValueError()), provenance={}))
    assert e.value.endpoint == "http://h:1/v1"
    _, failures = asyncio.run(build_gold(inst, _Search("client_error"), _Extractor(ValueError()), provenance={}))
    assert [why for _, why in failures] == ["search ended with end_reason=error"] * 2  # the model's: a failure
    _, failures = asyncio.run(build_gold(inst, _Search(), _Extractor(UnscoredError("no JSON")), provenance={}))
    assert all(why.startswith("extraction failed: UnscoredError") for _, why in failures)


# ------------------------------------------------------------------ the tasks over HTTP


@pytest.fixture(scope="module")
def instances_file(services, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("instances") / "demo3.jsonl"
    write_instances_jsonl(
        load_demo(services.corpus, services.index, services.cache_dir, n=200, seed=0).instances[:3], path
    )
    return path


def gold_cfg(tmp: Path, cache_dir: Path, instances: Path, api_base: str, *overrides: str) -> Any:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(
            "config",
            overrides=[
                "experiment=build_gold",
                "search=extractive",
                "extractor=gpt",
                f"build_gold.instances={instances}",
                f"build_gold.out_dir={tmp}/gold",
                f"services.llm.api_base={api_base}",
                f"paths.cache_dir={cache_dir}",
                f"paths.output_dir={tmp}/out",
                f"tracking.uri=sqlite:///{tmp}/mlflow.db",
                f"services.llm.cache.path={tmp}/llm_cache.sqlite",
                *FAST_RETRIES,
                "services.llm.preflight_completion=false",
                *overrides,
            ],
        )  # these tests fail the endpoint mid-run


def test_gold_task_stops_on_500s_fails_its_run_and_archives_nothing(
    tmp_path, cache_dir, instances_file, llm_server
) -> None:
    llm_server.handler = lambda body: Reply.error(500, "internal error")
    cfg = gold_cfg(tmp_path, cache_dir, instances_file, llm_server.base_url)
    line = stopped(lambda: run(cfg))
    assert line.startswith("cts: build_gold stopped") and f"server_error at {llm_server.base_url}" in line, line
    assert llm_server.requests and not (tmp_path / "gold").exists()
    run_row = the_task_run(f"sqlite:///{tmp_path}/mlflow.db")
    assert run_row["status"] == "FAILED" and run_row["tags.stop_reason"] == "infra"
    assert run_row["tags.cts.kind"] == "build_gold"


def test_gold_task_stops_when_the_endpoint_refuses_connections(tmp_path, cache_dir, instances_file) -> None:
    cfg = gold_cfg(
        tmp_path, cache_dir, instances_file, dead_base_url(), "services.llm.preflight_probe=false", "concurrency=1"
    )
    line = stopped(lambda: run(cfg))
    assert f"connection at {cfg.services.llm.api_base}" in line and "Connect call failed" in line, line
    run_row = the_task_run(f"sqlite:///{tmp_path}/mlflow.db")
    assert run_row["status"] == "FAILED" and run_row["tags.stop_reason"] == "infra"
    assert not (tmp_path / "gold").exists()


def test_judge_robustness_stops_on_a_refused_judge(frozen_sweep: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "out"
    out.mkdir()
    cfg = compose_task(
        "judge_robustness",
        out,
        frozen_sweep,
        "+judge@robustness.judges.llm=gpt",
        f"services.llm.api_base={dead_base_url()}",
        f"paths.cache_dir={tmp_path}",
        *FAST_RETRIES,
        "services.llm.breaker_failures=1",
    )  # the first refused connection opens the breaker
    line = stopped(lambda: run_configured_task(cfg, build_services(cfg)))
    assert line.startswith("cts: judge_robustness stopped") and "circuit breaker open" in line, line
    run_row = the_task_run(f"sqlite:///{out}/unused.db")
    assert run_row["status"] == "FAILED" and run_row["tags.stop_reason"] == "circuit_open"
    assert not list(out.glob("judge_*"))  # no table of a partial re-judging


def test_backbone_stability_stops_on_500s(tmp_path: Path, llm_server) -> None:
    llm_server.handler = lambda body: Reply.error(503, "overloaded")
    out = tmp_path / "out"
    out.mkdir()
    cfg = compose_task(
        "backbone_stability",
        out,
        stability_sweep(tmp_path / "sweep"),
        f"services.llm.api_base={llm_server.base_url}",
        f"paths.cache_dir={tmp_path}",
        *FAST_RETRIES,
    )
    with open_dict(cfg):
        cfg.robustness.backbones = {
            "llm": {
                "ua": cfg.robustness.backbones.rules.ua,
                "rewriter": {"_target_": "cts.roles.baselines.BracketRewriterBaseline"},
            }
        }
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        ua = compose("config", overrides=["ua=gpt"]).ua
    with open_dict(cfg):
        cfg.robustness.backbones.llm.ua = ua
    line = stopped(lambda: run_configured_task(cfg, build_services(cfg)))
    assert line.startswith("cts: backbone_stability stopped") and "server_error" in line, line
    assert 2 <= len(llm_server.requests) <= 8  # 2 items x 2 questions x 2 attempts at most, then stopped
    run_row = the_task_run(f"sqlite:///{out}/unused.db")
    assert run_row["status"] == "FAILED" and run_row["tags.stop_reason"] == "infra"
    assert not list(out.glob("backbone_*"))


@pytest.mark.slow
def test_gold_command_exits_1_with_one_line_and_no_traceback(tmp_path, cache_dir, instances_file, llm_server) -> None:
    llm_server.handler = lambda body: Reply.error(500, "internal error")
    args = [
        "experiment=build_gold",
        "search=extractive",
        "extractor=gpt",
        f"build_gold.instances={instances_file}",
        f"build_gold.out_dir={tmp_path}/gold",
        f"services.llm.api_base={llm_server.base_url}",
        f"paths.cache_dir={cache_dir}",
        f"hydra.run.dir={tmp_path}/run",
        f"tracking.uri=sqlite:///{tmp_path}/m.db",
        f"services.llm.cache.path={tmp_path}/llm_cache.sqlite",
        *FAST_RETRIES,
        "services.llm.preflight_completion=false",
    ]  # the endpoint fails mid-run, not at the pre-flight
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    proc = run_script(
        [str(REPO / "run.py"), *args],
        cwd=tmp_path,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("cts: build_gold stopped by an infrastructure failure")
    assert the_task_run(f"sqlite:///{tmp_path}/m.db")["status"] == "FAILED"
