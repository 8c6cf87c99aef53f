"""A newcomer's first run: a quiet console, a complete run.log, and closing lines that say where to look."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cts._util.console import DETAIL, ConsoleFilter, job_closing_lines, ui_command
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]


def _record(name: str, level: int, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord(name, level, __file__, 1, "message", None, None)
    record.__dict__.update(extra)
    return record


def test_the_console_shows_warnings_and_own_info_but_not_details_or_third_party_chatter() -> None:
    keep = ConsoleFilter()
    assert keep.filter(_record("cts.corpus.index", logging.INFO))
    assert keep.filter(_record("bm25s", logging.WARNING)) and keep.filter(_record("httpx", logging.ERROR))
    assert not keep.filter(_record("cts.compose.app", logging.INFO, **DETAIL))
    assert keep.filter(_record("cts.compose.app", logging.WARNING, **DETAIL))  # a detail that went wrong shows
    assert not keep.filter(_record("bm25s", logging.DEBUG)) and not keep.filter(_record("httpx", logging.INFO))
    assert not keep.filter(_record("cts.corpus.index", logging.DEBUG))
    assert not keep.filter(_record("ctsx", logging.INFO))  # a prefix is a logger name, not a string prefix


def test_the_closing_lines_name_the_store_command_quoted() -> None:
    lines = job_closing_lines("/o/runs/a b", "r1", "cts", "sqlite:////o/a b/mlflow.db")
    assert lines[0].startswith("job dir:  /o/runs/a b") and "run r1 in experiment 'cts'" in lines[1]
    assert lines[2].strip().startswith("mlflow ui --backend-store-uri 'sqlite:////o/a b/mlflow.db'")
    assert ui_command("http://127.0.0.1:5000") == "open http://127.0.0.1:5000"
    assert len(job_closing_lines("/o/j", None, "cts", "sqlite:///x.db")) == 1  # no run: no command


@pytest.mark.slow
def test_a_first_offline_job_prints_no_details_and_ends_saying_where_to_look(tmp_path: Path) -> None:
    job, store = tmp_path / "job", f"sqlite:///{tmp_path}/mlflow.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTS_", "HYDRA_")) and k != "PROJECT_ROOT"}
    env["CTS_CACHE_DIR"] = str(tmp_path / "cache")  # empty: the index is built, as on a first run (bm25s DEBUG)
    proc = run_script(
        [str(REPO / "run.py"), "experiment=offline", "limit=3", f"hydra.run.dir={job}"] + [f"tracking.uri={store}"],
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    console = (proc.stdout + proc.stderr).splitlines()
    assert not [line for line in console if "[DEBUG]" in line or "] - built cts." in line]
    log = (job / "run.log").read_text()
    assert "][cts.compose.app][INFO] - built cts.roles.rules.RuleClarifier" in log and "[bm25s][DEBUG]" in log
    run_id = json.loads((job / "summary.json").read_text())["run_id"]
    out = proc.stdout.rstrip().splitlines()
    assert out[-3].startswith(f"job dir:  {job}")
    assert out[-2].startswith(f"MLflow:   run {run_id} in experiment 'cts'")
    assert out[-1].strip().startswith(f"mlflow ui --backend-store-uri {store}")
