"""SIGINT, SIGTERM and SIGKILL mid-sweep on the cts launcher (a fresh copy of the repo; the default
sweep dir, or for SIGTERM a relative one given on the command line), then the resume command run from
another directory: every job exactly once in one dir, the same MLflow runs, none left RUNNING, no
second FINISHED run for a job."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cts._util.interrupt import resume_command
from cts.tracking import RUN_FILE
from tests.llm_fakes import ScriptedServer, sweep_reply
from tests.runs import clone_env, fresh_clone, job_runs, sweep_dirs

CARD = ("-m", "clarifier=gpt,ernie,claude", "k=1,2,3")
N = 6


def _records(sweep: Path) -> dict[str, list[str]]:
    return {p.parent.name: p.read_text().splitlines() for p in sweep.glob("*/records.jsonl")}


def _run_ids(sweep: Path) -> dict[str, str]:
    return {p.parent.name: json.loads(p.read_text())["run_id"] for p in sweep.glob(f"*/{RUN_FILE}")}


def _stop_mid_sweep(  # noqa: ANN202
    clone: Path, argv: list[str], env: dict[str, str], sig: signal.Signals, server: ScriptedServer
):
    """Start the sweep, signal it once every job runs and a few instances are done; (returncode, out, err, dir).

    The server holds its replies from then on, so the sweep stays where it was until the signal lands.
    """
    proc = subprocess.Popen(argv, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        dirs = sweep_dirs(clone)
        if len(dirs) == 1 and len(_run_ids(dirs[0])) == 9 and sum(map(len, _records(dirs[0]).values())) >= 4:
            server.hold()
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep ended before it could be stopped"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    server.release()
    (sweep,) = sweep_dirs(clone)
    return proc.returncode, out, err, sweep


def _printed_command(sig: signal.Signals, rc: int, out: str, err: str, argv: list[str], n_killed: int) -> str:
    """The command the sweep printed (after SIGKILL: the dir it announced, into the same command)."""
    if sig == signal.SIGKILL:  # nothing can print after SIGKILL; the launch line names the dir
        assert rc == -signal.SIGKILL
        sweep = re.search(r"Launching 9 jobs on one cts schedule in (\S+)", out + err).group(1)
        return resume_command(argv[2:], Path(sweep), sweep, script=argv[1])
    assert rc == 128 + sig, err[-3000:]
    assert not [w for w in ("Traceback", "KeyboardInterrupt", "CancelledError", "RuntimeWarning") if w in err], err
    stopped = re.findall(rf"^cts: stopped by {sig.name}: \d/{N} instances done in ", err, re.MULTILINE)
    assert len(stopped) == n_killed, err  # one line per job that was still running
    (line,) = [ln for ln in err.splitlines() if "resume with: " in ln]  # once, for the sweep
    assert line.startswith(f"cts: sweep stopped by {sig.name} (9 jobs in ")
    return line.split("resume with: ", 1)[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, given_dir",
    [(signal.SIGINT, None), (signal.SIGTERM, "outputs/multirun/given"), (signal.SIGKILL, None)],
    ids=["SIGINT", "SIGTERM-given-dir", "SIGKILL"],
)
def test_a_sweep_stopped_mid_way_resumes_from_another_directory(tmp_path, llm_server, cache_dir, sig, given_dir):
    llm_server.handler, llm_server.latency_s = sweep_reply, 0.1
    clone, elsewhere = fresh_clone(tmp_path), tmp_path / "elsewhere"
    elsewhere.mkdir()
    argv = [
        sys.executable,
        str(clone / "run.py"),
        *CARD,
        f"limit={N}",
        f"services.llm.api_base={llm_server.base_url}",
        f"services.llm.cache.path={tmp_path}/llm.sqlite",
        "hydra.launcher.job_concurrency=1",
        "hydra.launcher.progress=false",
        "tracking.instance_traces=false",  # signals, not traces, are under test (traces: tests/tracking/)
        *([f"hydra.sweep.dir={given_dir}"] if given_dir else []),  # relative to the root, where it is typed
    ]
    env = clone_env(cache_dir)
    rc, out, err, sweep = _stop_mid_sweep(clone, argv, env, sig, llm_server)
    assert sweep == clone / given_dir if given_dir else sweep.parent == clone / "outputs" / "multirun"
    stopped, run_ids = _records(sweep), _run_ids(sweep)
    assert 4 <= sum(map(len, stopped.values())) < 9 * N
    for lines in stopped.values():  # whole lines only: every record parses
        assert all(json.loads(line)["id"] for line in lines)
    runs = job_runs(clone)
    assert len(runs) == 9 and ("RUNNING" if sig == signal.SIGKILL else "KILLED") in set(runs["status"])
    assert set(runs["status"]) <= {"RUNNING" if sig == signal.SIGKILL else "KILLED", "FINISHED"}, (
        runs[["tags.mlflow.runName", "status"]],
        err[-3000:],
    )
    for _, run in runs[runs["status"] == "FINISHED"].iterrows():  # a job that was done before the signal
        assert len(stopped[Path(run["tags.cts.job_dir"]).name]) == N
    command = _printed_command(sig, rc, out, err, argv, int((runs["status"] == "KILLED").sum()))
    assert f"hydra.sweep.dir={sweep}" in command and command.split()[1] == str(clone / "run.py")

    llm_server.latency_s = 0.0  # slow replies were only there to catch the sweep mid-way
    done = subprocess.run(command, shell=True, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sweep_dirs(clone) == [sweep] and not (elsewhere / "outputs").exists()
    resumed = _records(sweep)
    assert len(resumed) == 9
    for job, lines in resumed.items():  # every instance exactly once; the records of the stopped run kept
        ids = [json.loads(line)["id"] for line in lines]
        assert len(ids) == len(set(ids)) == N and lines[: len(stopped.get(job, []))] == stopped.get(job, [])
    runs = job_runs(clone)  # the same nine runs, continued: none RUNNING, one FINISHED per job
    assert len(runs) == 9 and set(runs["status"]) == {"FINISHED"} and runs["tags.cts.job_dir"].is_unique
    assert _run_ids(sweep) == run_ids and set(runs["run_id"]) == set(run_ids.values())
    assert "(9 jobs)" in (sweep / "report" / "report.md").read_text()


@pytest.mark.serial  # a real SIGINT to this process while it waits
def test_a_ctrl_c_while_the_launcher_waits_lets_every_job_end_first() -> None:
    """Python < 3.12 marks a thread dead when Ctrl-C interrupts its join (CPython gh-90882): the
    process then exited under a job that was ending its MLflow run, which stayed RUNNING."""
    from hydra_plugins.cts_scheduler.cts_scheduler_launcher import _join_all, _then_set

    stop, finished = threading.Event(), []

    class Session:
        def cancel(self) -> None:
            stop.set()

    def job() -> None:  # stops when the sweep is cancelled, then takes a while to clean up
        stop.wait(10)
        time.sleep(0.5)
        finished.append(True)

    ended = [threading.Event()]
    thread = threading.Thread(target=_then_set, args=(ended[0], job))
    thread.start()
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    assert _join_all([thread], ended, Session()) is True
    assert finished == [True] and not thread.is_alive()
