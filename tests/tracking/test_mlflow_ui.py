"""The README's MLflow snippet runs as written, against the store two offline jobs leave behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import readme_commands as rc

REPO = Path(__file__).resolve().parents[2]


def _snippet() -> str:
    blocks = [b for b in rc.blocks((REPO / "README.md").read_text(encoding="utf-8")) if "mlflow.load_table" in b.text]
    assert len(blocks) == 1 and blocks[0].lang == "python"
    return blocks[0].text


def test_the_snippet_sets_the_experiment_before_it_loads_the_table() -> None:
    text = _snippet()
    assert text.index('mlflow.set_experiment("cts")') < text.index("mlflow.load_table(")
    assert "sqlite:///outputs/mlflow.db" in text  # the default store, relative to where the user runs it


@pytest.mark.slow
def test_the_readme_snippet_runs_as_written(tmp_path: Path, cache_dir: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    subprocess.run(
        [
            sys.executable,
            str(REPO / "run.py"),
            "-m",
            "experiment=offline",
            "clarifier=rules_scope,rules_region",
            "limit=4",
            "sweep_report=false",
            f"tracking.uri={uri}",
            f"paths.cache_dir={cache_dir}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    out = subprocess.run(
        [sys.executable, "-c", _snippet()],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    ).stdout
    jobs = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/summary.json")]
    ids = {
        json.loads(line)["id"]
        for p in (tmp_path / "sweep").glob("*/records.jsonl")
        for line in p.read_text().splitlines()
    }
    header, *rows = [line for line in out.splitlines() if line.strip()]
    assert all(job["run_id"] in out for job in jobs) and len(jobs) == 2  # both jobs, side by side
    assert sorted(row.split()[0] for row in rows if row.startswith("demo-")) == sorted(ids)  # one row an instance
