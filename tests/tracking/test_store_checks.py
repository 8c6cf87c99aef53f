"""The store is checked before any work: a dead tracking server fails in seconds, a damaged SQLite file
is refused with one line and left as it was."""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cts import tracking
from cts.tracking._checks import server_down
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]


def damaged_store(tmp_path: Path) -> Path:
    """A store with a run whose last pages are overwritten: MLflow still opens it, SQLite's check does not pass."""
    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    tracking.prepare_store(uri)
    with tracking.open_mlflow_run(tracking.Experiment(uri, "exp"), "a", {"p": "1"}):
        tracking.log_metrics({"m": 1.0})
    n_pages = db.stat().st_size // 4096
    with db.open("r+b") as f:
        for page in range(n_pages - 8, n_pages):
            f.seek(page * 4096)
            f.write(b"\xa5" * 4096)
    return db


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_store_with_overwritten_pages_is_refused_before_anything_writes_into_it(tmp_path: Path) -> None:
    db = damaged_store(tmp_path)
    before = digest(db)
    with pytest.raises(tracking.TrackingStoreError) as e:
        tracking.check_store(f"sqlite:///{db}")
    message = e.value.message
    assert message.startswith(f"error: tracking: the MLflow store {db} (sqlite:///{db}, tracking.uri) is damaged")
    assert "btreeInitPage" in message and "\n" not in message
    assert "restore it from a backup" in message and f"tracking.uri=sqlite:///{tmp_path}/mlflow-new.db" in message
    assert digest(db) == before


def test_an_intact_store_and_a_missing_one_pass(tmp_path: Path) -> None:
    tracking.check_store(f"sqlite:///{tmp_path}/none-yet.db")
    db = tmp_path / "ok.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    tracking.check_store(f"sqlite:///{db}")


def test_a_dead_server_is_named_within_seconds(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    start = time.monotonic()
    with pytest.raises(tracking.TrackingStoreError) as e:
        tracking.check_store(uri)
    assert time.monotonic() - start < 2
    assert e.value.message.startswith(f"error: tracking: no MLflow tracking server answers at {uri} (tracking.uri)")


def test_a_server_that_accepts_but_never_answers_is_down_after_the_timeout() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        start = time.monotonic()
        why = server_down(f"http://127.0.0.1:{s.getsockname()[1]}", timeout_s=0.5)
    assert why == "no answer within 0 s" or (why is not None and "timed out" in why)
    assert time.monotonic() - start < 2


def run_py(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return run_script([str(REPO / "run.py"), *args], cwd=cwd, env=env, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("multirun", [False, True], ids=["run", "sweep"])
def test_run_py_refuses_a_damaged_store_and_a_dead_server_before_any_job(tmp_path: Path, multirun: bool) -> None:
    db = damaged_store(tmp_path)
    before = digest(db)
    sweep = ("clarifier=rules_scope,none", f"hydra.sweep.dir={tmp_path}/sweep")
    where = sweep if multirun else (f"hydra.run.dir={tmp_path}/run",)
    common = (*(["-m"] if multirun else []), "experiment=offline", "limit=2", *where)
    done = run_py(*common, f"tracking.uri=sqlite:///{db}", cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: tracking: the MLflow store"), done.stderr[-3000:]
    assert digest(db) == before and not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    done = run_py(*common, f"tracking.uri=http://127.0.0.1:{port}", cwd=tmp_path)
    assert done.returncode == 1 and time.monotonic() - start < 30
    assert f"error: tracking: no MLflow tracking server answers at http://127.0.0.1:{port}" in done.stderr
