"""Shared by several test modules (moved out of test_multirun.py, test_sweep_dir.py: no test module imports another)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from cts import tracking
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[1]


METRICS = [
    "score_mean",
    "score_p50",
    "score_p90",
    "score_min",
    "score_max",
    "orig_score_mean",
    "delta_mean",
    "delta_ci_low",
    "delta_ci_high",
    "ua_unknown_rate",
    "all_unknown_rate",
    "known_cnt_0",
    "known_cnt_1",
    "known_cnt_2",
    "known_cnt_3",
    "n_instances",
    "n_errors",
    "n_unscored",
    "cq_region_rate",
]


def run_py(
    *args: str, cwd: Path = REPO, timeout: int = 600, python: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``python [python...] run.py args...`` from ``cwd``; asserts it exits 0 (forked warm: tests/prewarmed.py)."""
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "HYDRA_FULL_ERROR": "1"}
    proc = run_script([*python, str(REPO / "run.py"), *args], cwd=cwd, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


OFFLINE_RESAMPLES = 2000
"""Bootstrap resamples of :func:`offline_job` (a report recomputing its CIs must use the same)."""


def offline_job(job_dir: Path, cache_dir: Path, *overrides: str) -> Path:
    """Run one offline job (``experiment=offline``) into ``job_dir``, with a tracking store beside it."""
    job_dir.parent.mkdir(parents=True, exist_ok=True)
    run_py(
        "experiment=offline",
        f"hydra.run.dir={job_dir}",
        f"tracking.uri=sqlite:///{job_dir.parent / 'mlflow.db'}",
        f"paths.cache_dir={cache_dir}",
        f"bootstrap.n_resamples={OFFLINE_RESAMPLES}",
        *overrides,
        cwd=job_dir.parent,
    )
    return job_dir


_COPIED = ("run.py", "conf", "prompts", "cts", "hydra_plugins")


_SWEEP_ENV = ("PROJECT_ROOT", "HYDRA_FULL_ERROR")


def fresh_clone(root: Path) -> Path:
    """A copy of the repo's code and configs in ``root/repo`` (no outputs, no caches)."""
    clone = root / "repo"
    clone.mkdir(parents=True)
    for name in _COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, clone / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, clone / name)
    return clone


def clone_env(cache_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: no sweep state of this process, the test session's data cache."""
    env = {k: v for k, v in os.environ.items() if k not in _SWEEP_ENV}
    return {**env, "CTS_CACHE_DIR": str(cache_dir), "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", **extra}


def sweep_dirs(clone: Path) -> list[Path]:
    """The dirs the clone's multiruns created under the default ``outputs/multirun``."""
    root = clone / "outputs" / "multirun"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def job_runs(clone: Path):  # noqa: ANN201 - a pandas DataFrame
    """The job runs of the clone's default MLflow store (experiment ``cts``)."""
    runs = tracking.search_runs(f"sqlite:///{clone}/outputs/mlflow.db", "cts")
    return runs[runs["tags.cts.kind"] == "job"]
