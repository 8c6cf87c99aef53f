"""The Slurm report job applies ``min_scored`` as a sweep's own end does: the report, then exit 3 with the same line.

Before, the dependent job that builds a Slurm sweep's report (:func:`report_job`) ended 0 whatever the
jobs measured, so ``--dependency=afterok`` on it, or a look at ``sacct``, read a sweep that measured
nothing as a success.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runs import REPO

pytestmark = pytest.mark.xdist_group("cluster")  # the Slurm test shares the session's cluster with test_cluster

UNSCORED_SWEEP_LINE = (
    "cts: sweep FAILED: 2 of its 2 jobs measured too little (min_scored=0: at least one score): "
    "clarifier=rules_scope,k=1 0% of its 8 scores; clarifier=rules_scope,k=2 0% of its 8 scores; exit status 3"
)


def _unscored_sweep(root: Path, *settings: str) -> Path:
    """A finished sweep dir as the report job finds it: two jobs whose every score is missing, its ``multirun.yaml``."""
    from omegaconf import OmegaConf

    from cts.core.records import ArmResult, Record

    sweep = root / "sweep"
    for k in (1, 2):
        job = sweep / f"clarifier=rules_scope,k={k}"
        job.mkdir(parents=True)
        records = [
            Record(
                id=i,
                k=k,
                questions=("哪一年？",) * k,
                answers=("未知",) * k,
                rewritten_query=f"重写 {i}",
                clarified=ArmResult(query=f"问 {i}", answer="无", score=None),
                orig=ArmResult(query=f"问 {i}", answer="无", score=None),
            )
            for i in ("甲", "乙", "丙", "丁")
        ]
        (job / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
        summary = {
            "metrics": {"n_instances": 4.0},
            "unscored": {"unscored_rate": 1.0},
            "choices": {"clarifier": "rules_scope", "judge": "lexical", "hydra/launcher": "cts_slurm"},
            "k": k,
            "run_name": job.name,
            "job_dir": str(job),
            "run_id": "",
        }
        (job / "summary.json").write_text(json.dumps(summary, ensure_ascii=False), encoding="utf-8")
    config = OmegaConf.from_dotlist(
        [
            "hydra.sweep.dir=${now:%Y}",  # saved unresolved: the report job sets the real dir
            "bootstrap.n_resamples=100",
            "bootstrap.confidence=0.95",
            "seed=0",
            f"tracking.uri=sqlite:///{root}/mlflow.db",
            "tracking.experiment=cts",
            *settings,
        ]
    )
    OmegaConf.save(config, sweep / "multirun.yaml")
    return sweep


def _report_job_process(sweep: Path) -> subprocess.CompletedProcess[str]:
    """The report job's entry point in a process of its own, as the Slurm step runs it (no submitit here)."""
    call = f"from hydra_plugins.cts_slurm_launcher.cluster import report_job; print(report_job({str(sweep)!r}))"
    return subprocess.run([sys.executable, "-c", call], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_the_report_job_of_a_sweep_that_measured_nothing_writes_the_report_then_exits_3(tmp_path: Path) -> None:
    sweep = _unscored_sweep(tmp_path)
    proc = _report_job_process(sweep)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == UNSCORED_SWEEP_LINE
    assert (sweep / "report" / "report.md").is_file() and proc.stdout == ""  # written, then the exit


def test_the_report_job_with_min_scored_null_returns_the_report(tmp_path: Path) -> None:
    sweep = _unscored_sweep(tmp_path, "min_scored=null")
    proc = _report_job_process(sweep)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(sweep / "report" / "report.md") and "FAILED" not in proc.stderr


def test_the_report_job_as_a_submitit_job_keeps_the_report_s_path_as_its_result(tmp_path: Path) -> None:
    import submitit

    from hydra_plugins.cts_slurm_launcher.cluster import report_job

    sweep = _unscored_sweep(tmp_path)
    executor = submitit.LocalExecutor(folder=tmp_path / "submitit")  # its controller hides the task's exit status
    executor.update_parameters(timeout_min=5)
    job = executor.submit(report_job, str(sweep))
    assert job.result() == str(sweep / "report" / "report.md")  # what the waiting submitter logs
    assert UNSCORED_SWEEP_LINE in job.stderr()
    assert "Job completed successfully" not in job.stderr() + job.stdout()  # the exit ended it, not a return


@pytest.mark.slow
def test_the_slurm_report_job_of_a_sweep_that_measured_nothing_exits_3(tmp_path: Path, slurm_cluster) -> None:
    import submitit

    from hydra_plugins.cts_slurm_launcher.cluster import REPORT_JOB_NAME, report_job, use_scontrol_when_no_sacct

    use_scontrol_when_no_sacct()  # as the launcher does: the test cluster keeps no accounting
    sweep = _unscored_sweep(tmp_path)
    executor = submitit.AutoExecutor(folder=sweep / ".submitit" / "%j", cluster="slurm")  # the launcher's folder
    executor.update_parameters(
        name=REPORT_JOB_NAME, slurm_partition=slurm_cluster.partition, cpus_per_task=1, mem_gb=1, timeout_min=10
    )
    job = executor.submit(report_job, str(sweep))
    deadline = time.monotonic() + 300
    while subprocess.run(["squeue", "-h", "-j", str(job.job_id)], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, "the report job is still queued"
        time.sleep(1)
    shown = subprocess.run(["scontrol", "show", "job", str(job.job_id)], capture_output=True, text=True).stdout
    assert "JobState=FAILED" in shown and "ExitCode=3:0" in shown, shown
    assert UNSCORED_SWEEP_LINE in _job_log(sweep, str(job.job_id))
    assert job.result() == str(sweep / "report" / "report.md")  # what a waiting submitter logs


def _job_log(sweep: Path, job_id: str) -> str:
    return "".join(p.read_text() for p in (sweep / ".submitit" / job_id).glob(f"{job_id}_0_log.*"))
