"""Hydra's own submitit launchers run the offline sweep as typed: their null defaults are the cluster's defaults.

``hydra/launcher=submitit_local`` and ``hydra/launcher=submitit_slurm`` (hydra-submitit-launcher)
default ``cpus_per_task`` and ``mem_gb`` to null; the value table refused them until it read null
as "the cluster's default". Each test runs the README's offline sweep with the launcher and no
override of its settings; the Slurm one on the one-node test cluster (tests/cluster_servers.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cts import tracking
from tests.runs import run_py

GRID = ("clarifier=rules_scope,none", "k=1,2")  # the README's offline sweep, on 2 x 2 jobs
LIMIT = 5


def offline_sweep(launcher: str, tmp_path: Path, cache_dir: Path) -> Path:
    """The offline sweep on ``launcher`` into ``tmp_path/sweep``; returns the sweep dir once it has ended."""
    sweep = tmp_path / "sweep"
    run_py(
        "-m",
        f"hydra/launcher={launcher}",
        "experiment=offline",
        *GRID,
        f"limit={LIMIT}",
        f"hydra.sweep.dir={sweep}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={cache_dir}",
        cwd=tmp_path,
    )
    return sweep


def check_sweep(sweep: Path, tmp_path: Path) -> None:
    """Four jobs of LIMIT records each, their MLflow runs finished, and the sweep report built."""
    records = {p.parent.name: p.read_text().splitlines() for p in sweep.glob("*/records.jsonl")}
    assert sorted(records) == [
        "clarifier=none,k=1",
        "clarifier=none,k=2",
        "clarifier=rules_scope,k=1",
        "clarifier=rules_scope,k=2",
    ]
    assert all(len(rows) == LIMIT and all(json.loads(r)["error"] is None for r in rows) for rows in records.values())
    assert (sweep / "report" / "report.md").is_file()
    runs = tracking.search_runs(f"sqlite:///{tmp_path}/mlflow.db")
    jobs = runs[runs["tags.cts.kind"] == "job"]
    assert len(jobs) == 4 and set(jobs["status"]) == {"FINISHED"}
    assert list(sweep.glob(".submitit/*/*_result.pkl"))  # the jobs ran through submitit


@pytest.mark.slow
def test_submitit_local_runs_the_offline_sweep_as_typed(tmp_path: Path, cache_dir: Path) -> None:
    check_sweep(offline_sweep("submitit_local", tmp_path, cache_dir), tmp_path)


@pytest.mark.slow
@pytest.mark.xdist_group(
    "cluster"
)  # the session's Slurm cluster starts once, on the worker of tests/plugins/test_cluster.py
def test_submitit_slurm_runs_the_offline_sweep_as_typed_on_the_test_cluster(
    tmp_path: Path, cache_dir: Path, slurm_cluster: object
) -> None:
    sweep = offline_sweep("submitit_slurm", tmp_path, cache_dir)
    check_sweep(sweep, tmp_path)
    scripts = [p.read_text() for p in sweep.glob(".submitit/*/*_submission.sh")]
    assert scripts and all("#SBATCH" in s for s in scripts)  # an sbatch array, not local processes
    assert not any("--cpus-per-task" in s or "--mem" in s for s in scripts)  # null: the cluster's defaults
