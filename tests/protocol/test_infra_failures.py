"""Infrastructure failures are not results: not committed, retried on resume, stopped by a breaker,
probed before any job starts; invalid model output stays a (scored-as-null) result."""

from __future__ import annotations

import asyncio
import json
import shlex
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from cts.compose.model_checks import Endpoint, endpoints_of, probe, probe_problems
from cts.compose.services import Services
from cts.core.errors import PreflightFailed, TaskStopped
from cts.core.records import ArmResult, ErrorInfo, Record, read_records
from cts.core.types import CallError, CircuitOpen, Instance
from cts.llm import LLMRuntime, LLMSettings, ResponseCache
from cts.llm._breaker import CircuitBreaker
from cts.protocol.job_files import INFRA_FILE, RECORDS_FILE, RETRIED_FILE
from cts.protocol.outcome import (
    JobIncomplete,
    Outcome,
    all_unscored_warning,
    finish,
    read_outcome,
)
from cts.protocol.pipeline import Roles, run_instances
from cts.protocol.stages import stage
from cts.roles.lexical import LexicalJudge
from cts.roles.llm import LLMClarifier
from cts.roles.rules import RuleRewriter, RuleUserAnswerer
from tests.helpers import TableSearch, Typer, built, gold_for
from tests.llm_server import Reply, ScriptedServer, llm_settings
from tests.prewarmed import run_script
from tests.protocol.fakes import QUESTIONS, SPEC, instances, job, llm_roles

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"


def dead_port() -> int:
    """A port that was bound and closed: nothing listens there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fails_for(marker: str, reply: Reply):
    """A handler: ``reply`` for requests mentioning ``marker``, valid questions otherwise."""
    return lambda body: reply if marker in json.dumps(body) else QUESTIONS


# ---------------------------------------------------------------- classification


@pytest.mark.parametrize("status, call_kind", [(401, "auth"), (403, "auth"), (404, "not_found")])
def test_401_403_404_are_infrastructure(llm_server, tmp_path, services, status, call_kind) -> None:
    llm_server.handler = fails_for("Mercury 1", Reply.error(status))
    records, stop = job(tmp_path, instances(3), llm_roles(llm_server, tmp_path, services))
    assert stop == "infra" and sorted(r.id for r in records) == ["i0", "i2"]
    assert {r.id for r in read_records(tmp_path / "job" / RECORDS_FILE)} == {"i0", "i2"}  # i1 not committed
    (failure,) = [json.loads(x) for x in (tmp_path / "job" / INFRA_FILE).read_text().splitlines()]
    assert failure["id"] == "i1" and failure["kind"] == "infra" and failure["stage"] == "clarify"
    assert failure["message"].startswith(f"{call_kind}:") and failure["endpoint"] == llm_server.base_url


def test_invalid_output_stays_a_result(llm_server, tmp_path, services) -> None:
    llm_server.handler = fails_for("Mercury 1", Reply("not questions at all"))  # re-asked, still invalid
    records, stop = job(tmp_path, instances(3), llm_roles(llm_server, tmp_path, services, max_reasks=1))
    assert stop == "done" and len(records) == 3
    bad = next(r for r in records if r.id == "i1")
    assert bad.error is not None and bad.error.kind == "invalid_output" and bad.score is None
    assert bad.infra_error is None
    assert (tmp_path / "job" / INFRA_FILE).read_text() == ""


def test_a_broken_response_cache_is_infrastructure(llm_server, tmp_path, services) -> None:
    class BrokenCache(ResponseCache):
        def get(self, key: str) -> dict | None:
            raise sqlite3.DatabaseError("database disk image is malformed")

    llm_server.handler = lambda body: QUESTIONS
    roles = llm_roles(llm_server, tmp_path, services)
    roles.clarifier.client.runtime.cache = BrokenCache(tmp_path / "c.sqlite")
    records, stop = job(tmp_path, instances(2), roles)
    assert records == [] and stop == "infra"
    lines = [json.loads(x) for x in (tmp_path / "job" / INFRA_FILE).read_text().splitlines()]
    assert {x["kind"] for x in lines} == {"infra"} and all("DatabaseError" in x["message"] for x in lines)


def test_stage_classifies_call_kinds_and_storage_exceptions() -> None:
    def info(exc: Exception) -> ErrorInfo:
        try:
            with stage("clarify"):
                raise exc
        except Exception as e:  # noqa: BLE001
            return e.info  # type: ignore[attr-defined]
        raise AssertionError("stage swallowed the error")

    assert info(CallError("connection", "refused", "http://x/v1")).kind == "infra"
    assert info(CallError("bad_request", "too long")).kind == "infra"  # rejected requests are no result
    assert info(CallError("client_error", "conflict")).kind == "api_error"
    assert info(CallError("batch", "no reply after 3 batch submission(s), last: HTTP 500")).kind == "infra"
    assert info(sqlite3.DatabaseError("file is not a database")).kind == "infra"
    assert info(OSError(28, "No space left on device")).kind == "infra"
    assert info(KeyError("bug")).kind == "exception"
    with pytest.raises(CircuitOpen), stage("clarify"):
        raise CircuitOpen("http://x/v1", 20, "connection: refused")


# ---------------------------------------------------------------- resume


def test_resume_retries_infrastructure_failures(llm_server, tmp_path, services) -> None:
    insts = instances(3)
    llm_server.handler = fails_for("Mercury 1", Reply.error(404))
    assert job(tmp_path, insts, llm_roles(llm_server, tmp_path, services))[1] == "infra"
    llm_server.handler = lambda body: QUESTIONS  # the endpoint is fixed
    records, stop = job(tmp_path, insts, llm_roles(llm_server, tmp_path, services))
    assert stop == "done" and [r.id for r in records] == ["i0", "i1", "i2"]
    assert sorted(r.id for r in read_records(tmp_path / "job" / RECORDS_FILE)) == ["i0", "i1", "i2"]  # once each
    assert (tmp_path / "job" / INFRA_FILE).read_text() == ""


def test_resume_retries_infrastructure_records_of_older_versions(llm_server, tmp_path, services) -> None:
    """Older versions committed infra failures as ``api_error``/``exception`` records: they run again."""
    old = [
        Record("i0", 1, error=ErrorInfo("clarify", "api_error", "connection: m after 6 attempt(s): refused")),
        Record("i1", 1, error=ErrorInfo("clarify", "exception", "DatabaseError: file is not a database")),
        Record("i2", 1, orig=ArmResult("q", error=ErrorInfo("search", "api_error", "search ended in error"))),
        Record("i3", 1, error=ErrorInfo("clarify", "invalid_output", "clarifier: invalid output")),  # a result
        Record("i4", 1, error=ErrorInfo("answer", "api_error", "batch: m: no reply after 3 batch submission(s)")),
        Record("i5", 1, error=ErrorInfo("clarify", "api_error", "client_error: HTTP 409 conflict")),  # a result
    ]
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / RECORDS_FILE).write_text("".join(r.to_json() + "\n" for r in old))
    llm_server.handler = lambda body: QUESTIONS
    records, stop = job(tmp_path, instances(6), llm_roles(llm_server, tmp_path, services))
    assert stop == "done" and [r.id for r in records] == ["i0", "i1", "i2", "i3", "i4", "i5"]
    assert len(llm_server.requests) == 4  # i3 and i5 were finished
    committed = list(read_records(tmp_path / "job" / RECORDS_FILE))
    assert sorted(r.id for r in committed) == [f"i{i}" for i in range(6)] and all(
        r.infra_error is None for r in committed
    )
    assert sorted(r.id for r in read_records(tmp_path / "job" / RETRIED_FILE)) == ["i0", "i1", "i2", "i4"]


# ---------------------------------------------------------------- circuit breaker


def test_circuit_breaker_stops_the_job(llm_server, tmp_path, services) -> None:
    llm_server.handler = lambda body: Reply.error(401)
    roles = llm_roles(llm_server, tmp_path, services, breaker_failures=5)
    records, stop = job(tmp_path, instances(40), roles, concurrency=2)
    assert stop == "circuit_open" and records == []
    assert 5 <= len(llm_server.requests) < 10  # not one request per instance
    lines = [json.loads(x) for x in (tmp_path / "job" / INFRA_FILE).read_text().splitlines()]
    assert lines[-1]["kind"] == "circuit_open" and lines[-1]["endpoint"] == llm_server.base_url


def test_breaker_opens_on_connection_refused_and_is_reset_by_an_answer(tmp_path) -> None:
    base = f"http://127.0.0.1:{dead_port()}/v1"
    settings = LLMSettings.from_mapping(
        {
            "api_base": base,
            "cache": {"mode": "off"},
            "max_attempts": 2,
            "breaker_failures": 4,
            "backoff": {"initial": 0.01, "max": 0.01, "jitter": 0.0},
        }
    )
    runtime = LLMRuntime(settings, ResponseCache(tmp_path / "c.sqlite", "off"))
    client = runtime.client(SPEC, role="clarifier")
    msgs = [{"role": "user", "content": "hi"}]

    async def calls() -> list[str]:
        out = []
        for _ in range(3):
            try:
                await client.complete(msgs)
            except (CallError, CircuitOpen) as e:
                out.append(type(e).__name__ + ":" + getattr(e, "kind", ""))
        return out

    assert asyncio.run(calls()) == ["CallError:connection", "CallError:connection", "CircuitOpen:circuit_open"]
    assert runtime.breaker.open_endpoints == (base,)
    breaker = CircuitBreaker(threshold=2)
    breaker.failure("e", "connection", "refused")
    breaker.failure("e", "server_error", "503")  # the server answered: the count restarts
    breaker.failure("e", "auth", "401")
    assert breaker.open_endpoints == ()
    breaker.failure("e", "not_found", "404")
    assert breaker.open_endpoints == ("e",)
    with pytest.raises(CircuitOpen, match="2 consecutive"):
        breaker.check("e")


# ---------------------------------------------------------------- pre-flight probes


def composed(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides)


def test_probe_targets_every_distinct_endpoint_once(llm_server) -> None:
    a = composed([f"services.llm.api_base={llm_server.base_url}", "clarifier=gpt"])
    b = composed([f"services.llm.api_base={llm_server.base_url}", "clarifier=claude"])
    (one,) = endpoints_of([a, b])
    assert one.api_base == llm_server.base_url and "clarifier.model" in one.roles and "judge.model" in one.roles
    assert {"gpt-5.2", "claude-sonnet-4-5", "ernie-4.5-turbo-128k"} <= set(one.models)
    assert probe_problems([one], timeout_s=5) == [] and llm_server.gets == ["/v1/models"]
    assert llm_server.requests == []  # GET /models only: no completion, no tokens


def test_hosted_apis_without_api_base_are_not_probed(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    monkeypatch.setenv("QIANFAN_API_KEY", "y")
    monkeypatch.setenv("WEBDANCER_API_BASE", "http://127.0.0.1:9/v1")
    cfg = composed(["clarifier=gpt"])
    bases = {e.api_base for e in endpoints_of([cfg])}
    assert bases == {
        "https://qianfan.baidubce.com/v2",
        "http://127.0.0.1:9/v1",
    }  # gpt (hosted, no api_base): key check only


@pytest.mark.parametrize("status", [401, 403])
def test_probe_rejected_key_is_a_problem(llm_server, status) -> None:
    llm_server.models_status = status
    endpoint = Endpoint(llm_server.base_url, "k", ("m",), ("judge.model",))
    assert f"the key was rejected (HTTP {status})" in str(probe(endpoint, 5))


def test_probe_without_an_answer_is_bounded_by_the_timeout() -> None:
    with socket.socket() as listener:  # accepts connections (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        base = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        problem = probe(Endpoint(base, None, ("m",), ("clarifier.model",)), timeout_s=0.5)
    assert problem is not None and "no answer within 0.5 s" in problem and base in problem


@pytest.mark.slow
def test_dead_endpoint_fails_the_preflight_naming_it(tmp_path) -> None:
    base = f"http://127.0.0.1:{dead_port()}/v1"
    db = tmp_path / "mlflow.db"
    proc = run_script(
        [
            str(REPO / "run.py"),
            f"services.llm.api_base={base}",
            "limit=2",
            f"hydra.run.dir={tmp_path}/run",
            f"tracking.uri=sqlite:///{db}",
            f"paths.cache_dir={tmp_path}/cache",
        ],
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "pre-flight failed" in proc.stderr and f"endpoint {base}" in proc.stderr
    assert "ernie-4.5-turbo-128k" in proc.stderr and "clarifier.model" in proc.stderr
    assert "Connection refused" in proc.stderr
    assert not db.exists() and not (tmp_path / "run" / RECORDS_FILE).exists()  # nothing was started


def test_preflight_probe_can_be_turned_off(llm_server) -> None:
    from cts.compose.app import probe_endpoints

    llm_server.models_status = 401
    cfg = composed([f"services.llm.api_base={llm_server.base_url}", "services.llm.preflight_probe=false"])
    probe_endpoints([cfg])
    assert llm_server.gets == []
    with pytest.raises(PreflightFailed, match="pre-flight failed"):
        probe_endpoints([composed([f"services.llm.api_base={llm_server.base_url}"])])


# ---------------------------------------------------------------- how a job ends


def test_incomplete_job_says_so_in_its_last_lines_and_raises(tmp_path, capsys) -> None:
    (tmp_path / INFRA_FILE).write_text(
        json.dumps(
            {
                "id": "i1",
                "stage": "clarify",
                "kind": "infra",
                "message": "connection: refused",
                "endpoint": "http://h:1/v1",
            }
        )
        + "\n"
        + json.dumps(
            {
                "id": None,
                "kind": "circuit_open",
                "message": "http://h:1/v1: 20 consecutive",
                "endpoint": "http://h:1/v1",
            }
        )
        + "\n"
    )
    outcome = read_outcome(tmp_path, "circuit_open", n_total=50, n_done=10)
    with pytest.raises(JobIncomplete, match="40 instance"):
        finish(outcome, [], tmp_path, "python run.py k=1 hydra.run.dir=x", multirun=True)
    with pytest.raises(TaskStopped, match="Resume with: python run.py k=1 hydra.run.dir=x"):
        finish(outcome, [], tmp_path, "python run.py k=1 hydra.run.dir=x", multirun=False)
    err = capsys.readouterr().err
    assert "INCOMPLETE: 10 of 50" in err and "circuit breaker stopped the job" in err
    assert "http://h:1/v1: 1" in err and "1 instance(s) failed on infrastructure" in err


def test_all_unscored_job_is_loud_but_complete(tmp_path, capsys) -> None:
    bad = [Record(f"i{j}", 1, error=ErrorInfo("clarify", "invalid_output", "x")) for j in range(3)]
    finish(Outcome("done", 3, 3, ()), bad, tmp_path, "cmd", multirun=False)
    assert "ALL 3 INSTANCES ARE UNSCORED" in capsys.readouterr().err
    assert all_unscored_warning([Record("a", 1, clarified=ArmResult("q", score=50.0))]) is None


@pytest.mark.slow
def test_job_with_infrastructure_failures_exits_1_then_resumes(tmp_path, llm_server, cache_dir) -> None:
    from tests.llm_fakes import protocol_reply

    args = [
        sys.executable,
        str(REPO / "run.py"),
        f"services.llm.api_base={llm_server.base_url}",
        "limit=3",
        f"hydra.run.dir={tmp_path}/run",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={cache_dir}",
        f"services.llm.cache.path={tmp_path}/llm_cache.sqlite",
        "services.llm.preflight_completion=false",
    ]  # the model goes missing mid-run, not at the pre-flight
    llm_server.handler = lambda body: Reply.error(404, "model not found")  # the probe (GET) still answers
    proc = run_script(args[1:], cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    tail = proc.stderr.strip().splitlines()[-5:]
    assert "INCOMPLETE: 0 of 3" in tail[0] and "3 instance(s) failed on infrastructure" in tail[1], tail
    assert f"{llm_server.base_url}: 3" in tail[2] and "not_found" in tail[2], tail
    assert tail[-1].startswith(
        "cts: job incomplete (3 instance(s) missing), exit status 1. Resume with: "
        f"{shlex.join([sys.executable, str(REPO / 'run.py')])} "
    )
    assert tail[-1].endswith(f"hydra.run.dir={tmp_path}/run"), tail
    assert not list(read_records(tmp_path / "run" / RECORDS_FILE))

    llm_server.handler = protocol_reply  # the model is served again: the same command finishes the job
    proc = subprocess.run(args, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = list(read_records(tmp_path / "run" / RECORDS_FILE))
    assert sorted(r.id for r in records) == sorted({r.id for r in records}) and len(records) == 3
    assert all(r.error is None for r in records)
