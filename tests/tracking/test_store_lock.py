"""Processes opening one fresh MLflow store at the same moment never corrupt it; a broken store
gets one message that says how to recover."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cts import tracking
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
N_PROCESSES = 8
# Without the store lock every round fails (7 of 8 processes, measured over 6 rounds), so a few
# rounds catch a regression; CTS_STORE_RACE_ROUNDS=100 soaks it.
ROUNDS = int(os.environ.get("CTS_STORE_RACE_ROUNDS", "5"))


def open_like_jobs(barrier: object, uri: str, job_dir: str, n_jobs: int) -> None:
    """A process that runs ``n_jobs`` jobs' tracking (1 = a single job, more = a sequential multirun)."""
    barrier.wait()  # type: ignore[attr-defined]
    for i in range(n_jobs):
        d = Path(job_dir) / str(i)
        tags = {"cts.kind": "job", "cts.job_dir": str(d)}
        with tracking.open_mlflow_run(
            tracking.Experiment(uri, "race"), f"{Path(job_dir).name}-{i}", {"i": str(i)}, tags, job_dir=d
        ):
            tracking.log_metrics({"score_mean": float(i)})


def open_like_the_report(barrier: object, uri: str, job_dir: str, n_jobs: int) -> None:
    """A process that only reads (``python -m cts.report``, the notebook)."""
    barrier.wait()  # type: ignore[attr-defined]
    tracking.job_runs(uri)


@pytest.mark.slow
def test_8_processes_open_a_fresh_store_at_once_5_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """6 single jobs, a 2-job multirun and a report race on a fresh store, every round.

    Forked from a parent that has imported MLflow but opened no store, so each round
    costs the migrations, not 8 interpreter start-ups; real jobs race in the next test.
    Each round has an empty cache: the store is migrated, not copied from a template.
    """
    ctx = multiprocessing.get_context("fork")
    failures = []
    for r in range(ROUNDS):
        monkeypatch.setenv("CTS_CACHE_DIR", str(tmp_path / f"cache{r}"))
        uri = f"sqlite:///{tmp_path}/r{r}/mlflow.db"
        barrier = ctx.Barrier(N_PROCESSES)
        plan = [(open_like_jobs, 1)] * 6 + [(open_like_jobs, 2), (open_like_the_report, 0)]
        procs = [
            ctx.Process(target=fn, args=(barrier, uri, str(tmp_path / f"r{r}" / f"p{p}"), n))
            for p, (fn, n) in enumerate(plan)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=300)
        failures += [(r, p.exitcode) for p in procs if p.exitcode != 0]
        runs = tracking.job_runs(uri)  # the store is usable after the round
        assert len(runs) == 8 and set(runs["status"]) == {"FINISHED"}, (r, runs[["status"]])
    assert failures == []


def run_py(*args: str, cwd: Path, cache: Path | None = None) -> subprocess.Popen[str]:
    """``python args...``; ``cache``: its own ``CTS_CACHE_DIR`` (an empty one makes a fresh store migrate)."""
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "PYTHONPATH": str(REPO)}
    if cache is not None:
        env["CTS_CACHE_DIR"] = str(cache)
    return subprocess.Popen(
        [sys.executable, *args], cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


@pytest.mark.slow
def test_real_jobs_a_multirun_and_the_report_start_at_once_on_a_fresh_store(tmp_path: Path, cache_dir: Path) -> None:
    """The commands users run, at once: 6 single jobs, a multirun and ``python -m cts.report``.

    One round: each costs 8 interpreter start-ups; the race itself is repeated ROUNDS times above.
    """
    run = str(REPO / "run.py")
    for r in range(1):
        root = tmp_path / f"r{r}"
        root.mkdir()
        common = (
            "experiment=offline",
            "limit=2",
            "sweep_report=false",
            f"tracking.uri=sqlite:///{root}/mlflow.db",
            "tracking.experiment=race",
            f"paths.cache_dir={cache_dir}",
        )
        procs = [
            run_py(run, *common, "clarifier=rules_scope", f"k={1 + i % 3}", f"hydra.run.dir={root}/j{i}", cwd=root)
            for i in range(6)
        ]
        procs.append(
            run_py(run, "-m", *common, "clarifier=rules_region,none", f"hydra.sweep.dir={root}/sweep", cwd=root)
        )
        report = run_py("-m", "cts.report", "race", "--tracking-uri", f"sqlite:///{root}/mlflow.db", cwd=root)
        outputs = [(p.communicate(timeout=600)[0], p.returncode) for p in [*procs, report]]
        for out, rc in outputs[:-1]:
            assert rc == 0, out[-4000:]
        out, rc = outputs[-1]  # the report may find no finished job yet, but never a broken store
        assert rc == 0 or "no finished job found in race" in out, out[-4000:]
        runs = tracking.job_runs(f"sqlite:///{root}/mlflow.db", "race")
        assert len(runs) == 8 and set(runs["status"]) == {"FINISHED"}


def make_store(path: Path, with_run: bool) -> str:
    uri = f"sqlite:///{path}"
    tracking.prepare_store(uri)
    if with_run:
        with tracking.open_mlflow_run(tracking.Experiment(uri, "exp"), "a", {}):
            pass
    return uri


def test_a_store_left_half_migrated_gets_one_message_with_the_repair(tmp_path: Path) -> None:
    make_store(tmp_path / "good.db", with_run=True)
    broken = tmp_path / "broken.db"
    shutil.copy(tmp_path / "good.db", broken)
    with sqlite3.connect(broken) as con:  # what a process killed inside an alembic batch migration leaves
        con.execute("CREATE TABLE _alembic_tmp_experiments (id INTEGER)")
        con.execute("UPDATE alembic_version SET version_num = '0a8213491aaa'")
    with pytest.raises(tracking.TrackingStoreError) as e:
        tracking.prepare_store(f"sqlite:///{broken}")
    message = str(e.value)
    assert message.startswith(f"cts: the MLflow store sqlite:///{broken} cannot be opened")
    assert "It holds 1 runs" in message and f"cp {broken} {broken}.bak" in message
    assert f"sqlite3 {broken} 'DROP TABLE _alembic_tmp_experiments' && mlflow db upgrade sqlite:///{broken}" in message
    assert e.value.message == message and e.value.exit_code == 1  # the entry point prints it once, no traceback
    assert not isinstance(e.value, SystemExit)  # library code never ends the process


def test_a_file_that_is_not_sqlite_is_said_so_and_kept(tmp_path: Path) -> None:
    db = tmp_path / "garbage.db"
    db.write_bytes(b"not a database" * 100)
    with pytest.raises(tracking.TrackingStoreError) as e:
        tracking.prepare_store(f"sqlite:///{db}")
    assert e.value.message.startswith(f"error: tracking: the MLflow store {db} (sqlite:///{db}, tracking.uri) is not")
    assert "header (first 100 bytes) is overwritten" in e.value.message and "Keep the file" in e.value.message
    assert "delete" not in e.value.message and "\n" not in e.value.message
    assert db.read_bytes() == b"not a database" * 100


def test_the_store_lock_sits_beside_a_sqlite_file(tmp_path: Path) -> None:
    assert tracking.store_lock_path(f"sqlite:///{tmp_path}/s/m.db") == tmp_path / "s" / "m.db.lock"
    assert tracking.store_lock_path("http://127.0.0.1:5000") is None
    other = tracking.store_lock_path("postgresql://u@127.0.0.1/mlflow")
    assert other is not None and other.name.startswith("cts-mlflow-")


@pytest.mark.slow
def test_a_sweep_on_the_cts_launcher_with_a_broken_store_is_refused_before_any_job(
    tmp_path: Path, cache_dir: Path
) -> None:
    """The launcher's jobs open the store themselves, but the launch checks it first: one line, exit 1, no job."""
    db = tmp_path / "garbage.db"
    db.write_bytes(b"not a database" * 100)
    proc = run_script(
        [
            str(REPO / "run.py"),
            "-m",
            "experiment=offline",
            "clarifier=rules_region,none",
            "limit=1",
            "sweep_report=false",
            f"tracking.uri=sqlite:///{db}",
            f"paths.cache_dir={cache_dir}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            "hydra/launcher=cts",
            "hydra.launcher.progress=false",
        ],
        cwd=tmp_path,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert out.startswith("error: tracking: the MLflow store") and "is not a SQLite database" in out, out[-4000:]
    assert len(out.strip().splitlines()) == 1 and not (tmp_path / "sweep").exists()
    assert db.read_bytes() == b"not a database" * 100  # nothing was written into it


KILLED_MID_MIGRATION = """
import sys, time
import mlflow.store.db.utils as utils
def stuck(engine):  # the initial tables exist; the migrations would run next
    print("migrating", flush=True)
    time.sleep(120)
utils._upgrade_db = stuck
from cts import tracking
tracking.prepare_store(sys.argv[1])
"""


def test_a_process_killed_while_it_creates_the_store_leaves_none_half_built(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    proc = run_py("-c", KILLED_MID_MIGRATION, f"sqlite:///{db}", cwd=tmp_path, cache=tmp_path / "cache")
    assert proc.stdout is not None
    assert any(line.strip() == "migrating" for line in iter(proc.stdout.readline, ""))  # after MLflow's log lines
    proc.kill()
    proc.wait(30)
    assert not db.exists()  # only the part it was building, beside it
    assert [p.name for p in tmp_path.glob("mlflow.db.creating-*")] == [f"mlflow.db.creating-{proc.pid}"]
    assert not list((tmp_path / "cache").rglob("*.db*"))  # nor a template of it
    uri = make_store(db, with_run=True)  # the next run creates it whole, and clears the part
    client = tracking.mlflow_module().MlflowClient(tracking_uri=uri)
    assert len(client.search_runs([client.get_experiment_by_name("exp").experiment_id])) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("mlflow.db")) == [
        "mlflow.db",
        "mlflow.db.lock",
    ]
