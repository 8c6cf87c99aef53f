"""hydra/launcher=cts: Ctrl-C and SIGTERM stop every job cleanly; a dead endpoint stops only its jobs."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cts import tracking
from tests.llm_fakes import sweep_reply
from tests.runs import REPO

CARD = ("-m", "clarifier=gpt,ernie,claude", "k=1,2,3")
ENV = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "PYTHONPATH": str(REPO)}


def _cts_sweep(tmp_path: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / "run.py"),
        *args,
        "hydra/launcher=cts",
        "hydra.launcher.progress=false",
        "tracking.instance_traces=false",  # signals, not traces, are under test (traces: tests/tracking/)
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        "tracking.experiment=sig",
        "sweep_report=false",
    ]


def _lines(sweep: Path) -> dict[str, list[str]]:
    return {p.parent.name: p.read_text().splitlines() for p in sweep.glob("*/records.jsonl")}


def _job_runs(tmp_path: Path):  # noqa: ANN202 - a pandas DataFrame
    runs = tracking.search_runs(f"sqlite:///{tmp_path}/mlflow.db", "sig")
    return runs[runs["tags.cts.kind"] == "job"]


@pytest.mark.slow
@pytest.mark.serial  # the signal must land while the sweep runs, between two record counts
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_every_job_cleanly_and_the_printed_command_resumes_the_sweep(
    tmp_path, llm_server, cache_dir, sig
):
    llm_server.handler = sweep_reply
    llm_server.latency_s = 0.1
    n = 6
    args = (
        *CARD,
        f"limit={n}",
        f"services.llm.api_base={llm_server.base_url}",
        f"paths.cache_dir={cache_dir}",
        f"services.llm.cache.path={tmp_path}/llm.sqlite",
        "hydra.launcher.job_concurrency=1",
    )
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        _cts_sweep(tmp_path, *args), cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:  # every job started, a few instances finished
        if len(list(sweep.glob("*/mlflow_run.json"))) == 9 and sum(map(len, _lines(sweep).values())) >= 4:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep ended before it could be stopped"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    stopped = _lines(sweep)
    assert 4 <= sum(map(len, stopped.values())) < 9 * n
    for lines in stopped.values():  # whole lines only: every record parses
        assert all(json.loads(line)["id"] for line in lines)
    runs = _job_runs(tmp_path)
    assert len(runs) == 9 and "KILLED" in set(runs["status"]), runs[["tags.mlflow.runName", "status"]]
    for _, run in runs[runs["status"] != "KILLED"].iterrows():  # a job that was done before the signal
        assert run["status"] == "FINISHED" and len(stopped[Path(run["tags.cts.job_dir"]).name]) == n
    resumes = [line.split("resume with: ", 1)[1] for line in err.splitlines() if "resume with: " in line]
    assert len(resumes) == 1, err[-3000:]  # the sweep prints it once, for every job
    killed = int((runs["status"] == "KILLED").sum())  # one line per job still running, without a command
    assert sum(line.startswith(f"cts: stopped by {sig.name}: ") for line in err.splitlines()) == killed, err[-3000:]
    command = shlex.split(resumes.pop())
    assert command[:2] == [sys.executable, str(REPO / "run.py")] and f"hydra.sweep.dir={sweep}" in command
    done = subprocess.run(
        [sys.executable, *command[1:]], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = _lines(sweep)
    assert len(resumed) == 9
    for job, lines in resumed.items():  # every instance exactly once; the stopped run's records kept
        ids = [json.loads(line)["id"] for line in lines]
        assert len(ids) == len(set(ids)) == n and lines[: len(stopped.get(job, []))] == stopped.get(job, [])
    runs = _job_runs(tmp_path)
    assert len(runs) == 9 and set(runs["status"]) == {"FINISHED"}  # the same runs, continued


def _dead_base() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"  # closed again: connection refused


@pytest.mark.slow
def test_a_dead_endpoint_stops_only_the_jobs_that_use_it(tmp_path, llm_server, cache_dir):
    """Two jobs share one runtime (same services.llm); only the clarifier endpoint differs."""
    llm_server.handler = sweep_reply
    live, dead = llm_server.base_url, _dead_base()
    roles = [f"{role}.model.api_base={live}" for role in ("ua", "rewriter", "judge")]
    args = (
        "-m",
        "clarifier=gpt",
        f"clarifier.model.api_base={dead},{live}",
        "limit=6",
        *roles,
        f"search.model.api_base={live}",
        f"search.summary_model.api_base={live}",
        "hydra.sweep.subdir=job${hydra:job.num}",
        "services.llm.preflight_probe=false",
        "services.llm.preflight_completion=false",
        "services.llm.max_attempts=1",
        "services.llm.breaker_failures=2",
        f"paths.cache_dir={cache_dir}",
        f"services.llm.cache.path={tmp_path}/llm.sqlite",
        "hydra.launcher.job_concurrency=1",
    )
    env = {**ENV, "OPENAI_API_KEY": "sk-test", "QIANFAN_API_KEY": "sk-test"}
    proc = subprocess.run(
        _cts_sweep(tmp_path, *args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "1 of 2 jobs failed: job0\n" in out, out[-3000:]
    (resume,) = [line for line in out.splitlines() if "Resume with: " in line]  # once, for the sweep
    assert resume.startswith("cts: job incomplete (6 instance(s) missing), exit status 1. Resume with: ")
    command = shlex.split(resume.split("Resume with: ", 1)[1])
    assert command[2] == "-m" and f"clarifier.model.api_base={dead},{live}" in command  # the same sweep...
    assert command[-1] == f"hydra.sweep.dir={tmp_path / 'sweep'}"  # ...into the same dir
    sweep = tmp_path / "sweep"
    assert len(_lines(sweep)["job1"]) == 6  # the healthy job finished every instance
    assert not _lines(sweep).get("job0")
    failures = [json.loads(x) for x in (sweep / "job0" / "infra_failures.jsonl").read_text().splitlines()]
    assert any(f["kind"] == "circuit_open" and f["endpoint"] == dead for f in failures)
    runs = _job_runs(tmp_path).set_index("tags.cts.job_dir")["status"]
    assert runs[str(sweep / "job0")] == "FAILED" and runs[str(sweep / "job1")] == "FINISHED"
