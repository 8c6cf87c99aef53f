"""Jobs stopped by SIGTERM, SIGINT and SIGKILL mid-way: no run left RUNNING, a resume finishes
every instance exactly once in the same MLflow run, and the report counts the job dir once."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cts import tracking
from cts._util.interrupt import resume_command
from cts.core.records import read_records
from cts.report import load_jobs
from tests.llm_fakes import protocol_reply

REPO = Path(__file__).resolve().parents[2]
LIMIT = 10


def job_args(tmp_path: Path, base_url: str, cache_dir: Path, job_dir: Path, limit: int = LIMIT) -> list[str]:
    """A single offline job whose clarifier calls the local server."""
    return [
        "experiment=offline",
        "clarifier=gpt",
        f"limit={limit}",
        "concurrency=2",
        f"services.llm.api_base={base_url}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        "tracking.experiment=sig",
        f"paths.cache_dir={cache_dir}",
        f"services.llm.cache.path={tmp_path}/llm_cache.sqlite",
        f"hydra.run.dir={job_dir}",
    ]


def start(argv: list[str], log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        argv,
        cwd=log.parent,
        env=env,
        text=True,
        stdout=log.with_suffix(".out").open("w"),
        stderr=log.with_suffix(".err").open("w"),
    )


def wait_for_records(job_dir: Path, proc: subprocess.Popen[str], n: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list(read_records(job_dir / "records.jsonl"))) >= n:
            return
        time.sleep(0.1)
    pytest.fail(f"the job did not reach {n} records (exit {proc.poll()})")


def the_run(tmp_path: Path):
    runs = tracking.search_runs(f"sqlite:///{tmp_path}/mlflow.db", "sig")
    runs = runs[runs["tags.cts.kind"] == "job"]
    assert len(runs) == 1, runs[["run_id", "status"]]
    return runs.iloc[0]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signalled_job_resumes_into_the_same_run_and_counts_once(tmp_path, llm_server, cache_dir, sig) -> None:
    llm_server.handler = protocol_reply
    llm_server.hold(after=5)  # the pre-flight probe and 4 instances' calls: the job cannot finish first
    job_dir = tmp_path / "job"
    argv = [sys.executable, str(REPO / "run.py"), *job_args(tmp_path, llm_server.base_url, cache_dir, job_dir)]
    proc = start(argv, tmp_path / "first")
    wait_for_records(job_dir, proc, 2)
    proc.send_signal(sig)
    rc = proc.wait(timeout=120)
    llm_server.release()

    run_id = json.loads((job_dir / tracking.RUN_FILE).read_text())["run_id"]
    run = the_run(tmp_path)
    assert run.run_id == run_id
    done = len(list(read_records(job_dir / "records.jsonl")))
    assert 2 <= done < LIMIT
    err = (tmp_path / "first.err").read_text()
    if sig == signal.SIGKILL:
        assert rc == -signal.SIGKILL and run.status == "RUNNING"  # nothing can run on SIGKILL...
        command = resume_command(argv[2:], job_dir, script=argv[1])
    else:  # ...the others end the run KILLED with one line and the exact resume command, no traceback
        assert rc == 128 + sig and run.status == "KILLED", err[-3000:]
        assert not [w for w in ("Traceback", "KeyboardInterrupt", "CancelledError") if w in err], err[-3000:]
        (line,) = [ln for ln in err.splitlines() if ln.startswith("cts: stopped")]
        assert line.startswith(f"cts: stopped by {sig.name}: {done}/{LIMIT} instances done in {job_dir}; ")
        command = line.split("resume with: ", 1)[1]
        assert command == resume_command(argv[2:], job_dir, script=argv[1])

    resume = start([sys.executable, *shlex.split(command)[1:]], tmp_path / "resume")
    assert resume.wait(timeout=300) == 0, (tmp_path / "resume.err").read_text()[-3000:]
    ids = [r.id for r in read_records(job_dir / "records.jsonl")]
    assert len(ids) == LIMIT == len(set(ids))  # every instance exactly once
    run = the_run(tmp_path)  # ...the same run, finished, with metrics over all records
    assert run.run_id == run_id and run.status == "FINISHED"
    assert run["metrics.n_instances"] == LIMIT
    (job,) = load_jobs(job_dir)  # the report counts the dir once, from the dir and from MLflow
    assert len(job.records) == LIMIT
    (job,) = load_jobs("sig", f"sqlite:///{tmp_path}/mlflow.db")
    assert len(job.records) == LIMIT and job.run_id == run_id
    assert run_trace_instances(tmp_path, run_id) == sorted(ids)  # one trace per instance: none lost, none twice


def run_trace_instances(tmp_path: Path, run_id: str) -> list[str]:
    """The instance id of every trace of the run, sorted (a duplicate shows twice)."""
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_run(run_id).info.experiment_id
    found = client.search_traces(locations=[experiment], filter_string=f"metadata.`mlflow.sourceRun` = '{run_id}'")
    return sorted(t.info.tags["cts.instance_id"] for t in found)


@pytest.mark.slow
def test_a_rerun_with_a_smaller_limit_reports_what_mlflow_logs(tmp_path, llm_server, cache_dir) -> None:
    """One source of truth: the job dir's records (here 6), in MLflow, summary.json and the report."""
    llm_server.handler = protocol_reply
    job_dir = tmp_path / "job"
    for limit in (6, 3):
        argv = [
            sys.executable,
            str(REPO / "run.py"),
            *job_args(tmp_path, llm_server.base_url, cache_dir, job_dir, limit),
        ]
        assert start(argv, tmp_path / f"l{limit}").wait(timeout=300) == 0, (tmp_path / f"l{limit}.err").read_text()
    run = the_run(tmp_path)
    assert run["metrics.n_instances"] == 6 and run.status == "FINISHED"
    assert json.loads((job_dir / "summary.json").read_text())["metrics"]["n_instances"] == 6
    (job,) = load_jobs(job_dir)
    assert len(job.records) == 6
    (job,) = load_jobs("sig", f"sqlite:///{tmp_path}/mlflow.db")
    assert len(job.records) == 6
