"""hydra/launcher=cts: a dead endpoint stops only its jobs (Ctrl-C and SIGTERM: test_sweep_signals.py)."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cts import tracking
from tests.llm_fakes import sweep_reply
from tests.runs import REPO

ENV = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "PYTHONPATH": str(REPO)}


def _cts_sweep(tmp_path: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / "run.py"),
        *args,
        "hydra/launcher=cts",
        "hydra.launcher.progress=false",
        "tracking.instance_traces=false",  # stops, not traces, are under test (traces: tests/tracking/)
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


# Ctrl-C and SIGTERM mid-sweep (every job stopped cleanly, one printed command that resumes the
# sweep): tests/sweep/test_sweep_signals.py, with a given sweep dir and with the default one.


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
