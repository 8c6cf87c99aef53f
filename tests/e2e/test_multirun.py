"""The real multirun command as a subprocess: 9 jobs with the joblib launcher, one fresh MLflow store."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cts import tracking
from tests.prewarmed import run_script
from tests.runs import METRICS, REPO, run_py


@pytest.mark.slow
def test_offline_sweep_9_jobs_joblib_fresh_store(tmp_path, cache_dir):
    sweep, db = tmp_path / "sweep", tmp_path / "store" / "mlflow.db"
    run_py(
        "-m",
        "experiment=offline",
        "clarifier=rules_scope,rules_region,none",
        "k=1,2,3",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={sweep}",
        f"tracking.uri=sqlite:///{db}",
        f"paths.cache_dir={cache_dir}",
        f"paths.prompts_dir={REPO / 'prompts'}",
        cwd=tmp_path,
    )

    runs = tracking.search_runs(f"sqlite:///{db}")
    jobs = runs[runs["tags.cts.kind"] == "job"]
    assert len(jobs) == 9 and set(jobs["status"]) == {"FINISHED"}
    for name in METRICS:
        assert f"metrics.{name}" in jobs, name
    assert set(zip(jobs["tags.cts.system"], jobs["tags.cts.k"])) == {
        (c, k) for c in ("rules_scope", "rules_region", "none") for k in ("1", "2", "3")
    }
    assert (jobs["params.k"].astype(int) == jobs["tags.cts.k"].astype(int)).all()
    assert (jobs["metrics.n_instances"] >= 150).all() and (jobs["metrics.n_errors"] == 0).all()

    # The paper's claims, reproduced by the offline baselines on the demo set at k=1.
    k1 = jobs[jobs["tags.cts.k"] == "1"].set_index("tags.cts.system")
    assert k1.loc["rules_scope", "metrics.delta_ci_low"] > 0
    assert k1.loc["rules_region", "metrics.ua_unknown_rate"] > k1.loc["rules_scope", "metrics.ua_unknown_rate"]
    assert k1.loc["rules_region", "metrics.cq_region_rate"] > k1.loc["rules_scope", "metrics.cq_region_rate"]
    assert k1.loc["none", "metrics.delta_mean"] == 0 and math.isnan(k1.loc["none", "metrics.all_unknown_rate"])

    # Every job streamed its records and summary; the sweep report appeared by itself.
    assert len(list(sweep.glob("*/records.jsonl"))) == 9
    # Job dirs and run names carry the swept factors only (no absolute path, no nesting).
    expected = {f"clarifier={c},k={k}" for c in ("rules_scope", "rules_region", "none") for k in (1, 2, 3)}
    assert {p.parent.name for p in sweep.glob("*/records.jsonl")} == expected
    assert set(jobs["tags.mlflow.runName"]) == expected
    report = sweep / "report"
    assert (report / "report.md").is_file() and len(list(report.glob("*.png"))) == 4  # + frontier, questions
    reports = runs[runs["tags.cts.kind"] == "sweep_report"]
    assert len(reports) == 1


@pytest.mark.slow
def test_rerun_into_the_same_dir_resumes(tmp_path, cache_dir):
    job = tmp_path / "job"
    args = (
        "experiment=offline",
        "limit=12",
        f"hydra.run.dir={job}",
        f"tracking.uri=sqlite:///{tmp_path}/m.db",
        f"paths.cache_dir={cache_dir}",
    )
    run_py(*args, cwd=tmp_path)
    first = (job / "records.jsonl").read_text()
    run_py(*args, cwd=tmp_path)
    assert (job / "records.jsonl").read_text() == first  # nothing recomputed or appended
    proc = run_script(
        [str(REPO / "run.py"), *args, "clarifier=rules_region"],
        cwd=tmp_path,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "another configuration" in out
    assert "Keys that differ (stored -> now):" in out and "  clarifier.order: " in out  # what changed


@pytest.mark.slow
def test_preflight_stops_the_card_sweep_before_any_run(tmp_path):
    keys = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "QIANFAN_API_KEY", "WEBDANCER_API_BASE")
    env = {k: v for k, v in os.environ.items() if k not in keys}
    db = tmp_path / "mlflow.db"
    proc = run_script(
        [
            str(REPO / "run.py"),
            "-m",
            "clarifier=gpt,ernie,claude",
            "k=1,2,3",
            f"tracking.uri=sqlite:///{db}",
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "pre-flight failed" in out
    assert "ua.model (ernie): QIANFAN_API_KEY is not set" in out and "WEBDANCER_API_BASE is not set" in out
    # every swept variant is checked before the first job starts, each problem listed once
    assert "clarifier.model (gpt): OPENAI_API_KEY is not set" in out
    assert "clarifier.model (claude): ANTHROPIC_API_KEY is not set" in out
    assert out.count("ua.model (ernie): QIANFAN_API_KEY is not set") == 1
    assert "python run.py experiment=offline" in out
    assert not db.exists() and not (tmp_path / "sweep").exists()  # no half-started run or job
