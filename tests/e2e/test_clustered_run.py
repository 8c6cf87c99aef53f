"""A real offline sweep of the hand-written clustered set: gold, a refused cluster field, Table 3 by topic."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
CLUSTERED = REPO / "tests" / "fixtures" / "clustered" / "instances.jsonl"


def run_py(tmp: Path, cache_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    env.pop("HYDRA_FULL_ERROR", None)
    base = [
        f"paths.cache_dir={cache_dir}",
        f"tracking.uri=sqlite:///{tmp}/mlflow.db",
        f"paths.prompts_dir={REPO}/prompts",
    ]
    return run_script(
        [str(REPO / "run.py"), *args, *base],
        cwd=tmp,
        env=env,
        timeout=600,
    )


@pytest.mark.slow
def test_offline_sweep_of_the_handwritten_set_reports_clustered_intervals(tmp_path: Path, cache_dir: Path) -> None:
    gold = run_py(
        tmp_path,
        cache_dir,
        "experiment=build_gold",
        "search=extractive",
        "extractor=rules",
        f"build_gold.instances={CLUSTERED}",
        f"build_gold.out_dir={tmp_path / 'gold'}",
        f"hydra.run.dir={tmp_path}/g",
    )
    assert gold.returncode == 0, gold.stderr[-3000:]
    data = (
        "experiment=offline",
        "dataset=jsonl",
        f"dataset.path={CLUSTERED}",
        f"dataset.gold_path={tmp_path / 'gold' / 'gold.jsonl'}",
    )
    bad = run_py(tmp_path, cache_dir, *data, "dataset.cluster_field=source", f"hydra.run.dir={tmp_path}/bad")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert [line for line in bad.stderr.splitlines() if line.startswith("error: ")] == [
        "error: dataset.cluster_field=source: 12 of 12 instance(s) have no meta['source'] (a non-empty string or "
        "an integer): spring-water, spring-season, spring-device, crane-bird, crane-fly ...; set it on every "
        "instance, or dataset.cluster_field=null"
    ]
    sweep = tmp_path / "sweep"
    done = run_py(
        tmp_path,
        cache_dir,
        "-m",
        *data,
        "dataset.cluster_field=topic",
        "clarifier=rules_scope,rules_region,none",
        "k=1",
        f"hydra.sweep.dir={sweep}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(next(sweep.rglob("clarifier=rules_scope*/summary.json")).read_text())
    assert summary["ci"]["method"] == "cluster_bootstrap" and len(summary["ci"]["clusters"]) == 12
    metrics = summary["metrics"]
    assert metrics["n_clusters"] == 4 and math.isfinite(metrics["design_effect"])
    assert metrics["delta_ci_low"] <= metrics["delta_mean"] <= metrics["delta_ci_high"]
    table_3 = pd.read_csv(sweep / "report" / "delta_ci.csv").set_index("system")  # the report agrees with the job
    assert table_3.loc["rules_scope", ["delta_ci_low", "delta_ci_high"]].tolist() == pytest.approx(
        [metrics["delta_ci_low"], metrics["delta_ci_high"]]
    )
    table = (sweep / "report" / "delta_ci.md").read_text(encoding="utf-8")
    assert "cluster bootstrap by `topic`" in table and "| clusters | deff |" in table and "p (Holm)" in table
