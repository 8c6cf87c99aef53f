"""The launch's last step: the sweep report, the lines saying where the results are, the ``min_scored`` exit.

A sweep builds its paper-style report (:func:`report_or_exit`) and says where the sweep is
(:func:`end_sweep`); a single run says where its job is (:func:`end_run`). Either then exits 3
when a job measured too little (:mod:`cts.compose.scored`), after its closing lines; so does the
Slurm report job (:func:`check_scored_sweep`).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from cts._util.console import job_closing_lines, sweep_closing_lines
from cts.compose.schema import Config, default_of
from cts.compose.scored import check_job, check_sweep
from cts.core.errors import ReportFailed

if TYPE_CHECKING:
    from cts.report import ReportResult

log = logging.getLogger(__name__)


def end_sweep(config: DictConfig, n_jobs: int, plan: Any) -> None:
    """The end of a sweep: its report (``sweep_report``), its actual figures, its closing lines, ``min_scored``.

    Args:
        config: The sweep's config.
        n_jobs: The jobs the sweep launched (0: unknown).
        plan: The sweep's plan (``cts.plan.SweepPlan``; None: the launch is not known here).
    """
    from cts._util.startup import end_startup_gc
    from cts.plan import after_sweep
    from cts.sweep._shared import held_elsewhere, left_to_others, sweep_end

    end_startup_gc()  # a launcher whose jobs ran elsewhere (joblib, Slurm) left it off here
    sweep_dir = Path(str(config.hydra.sweep.dir))
    with sweep_end(sweep_dir):  # two sweeps started into one dir: the one that finishes last ends it
        held = held_elsewhere(sweep_dir)
        try:
            wanted = not held and config.get("sweep_report", default_of(Config, "sweep_report"))
            report = _report(config, n_jobs) if wanted else None
        finally:  # <sweep>/sweep_actual.json (the report's time in it), beside the forecast when there is one
            after_sweep(plan)
        where = sweep_closing_lines(
            str(sweep_dir),
            str(report / "report.md") if report else None,
            str(config.tracking.experiment),
            str(config.tracking.uri),
        )
        print("\n".join(where), flush=True)
        if held:
            print(left_to_others(sweep_dir, held), file=sys.stderr, flush=True)
            return
        check_scored_sweep(config)


def end_run(config: DictConfig, job_return: JobReturn | None) -> None:
    """The end of a single run that finished: where its results are and how to look at them, then ``min_scored``."""
    if job_return is None or job_return.status != JobStatus.COMPLETED or job_return.hydra_cfg is None:
        return
    job_dir = Path(str(job_return.hydra_cfg.hydra.runtime.output_dir))
    print("\n".join(job_closing_lines(str(job_dir), *_tracked_run(job_dir, config))), flush=True)
    check_job(job_dir, min_scored(config))  # the closing lines first: a job that measured too little still says where


def report_or_exit(config: DictConfig, n_jobs: int) -> Path:
    """Build the sweep report; refuse with ``error:`` lines when it fails or misses some of the sweep's jobs.

    Args:
        config: The sweep's config.
        n_jobs: The jobs the sweep launched (0: unknown).
    """
    from cts.report.jobs import job_dirs

    sweep_dir = str(config.hydra.sweep.dir)
    found = len(job_dirs(sweep_dir)) if Path(sweep_dir).is_dir() else 0
    if not found:
        raise ReportFailed(f"error: sweep report: no finished job found in {sweep_dir}")
    result = build_report(config)
    if not result.ok:
        raise ReportFailed("\n".join(f"error: sweep report: {e}" for e in result.errors))
    if found < n_jobs:
        raise ReportFailed(f"error: sweep report: only {found} of the sweep's {n_jobs} jobs finished in {sweep_dir}")
    assert result.out_dir is not None
    return result.out_dir


def report_sweep(config: DictConfig) -> Path | None:
    """Build the sweep report of ``config``'s sweep dir and log it to MLflow as a sweep-level run.

    On Slurm a dependent job runs it after the last job (:func:`hydra_plugins.cts_slurm_launcher.cluster.report_job`).

    Returns:
        The report's dir, or None when it could not be built (the errors are logged).
    """
    result = build_report(config)
    for error in result.errors:
        log.error("sweep report: %s", error)
    return result.out_dir if result.ok else None


def build_report(config: DictConfig) -> ReportResult:
    """Build the report of ``config``'s sweep dir; when built, log it as a sweep-level MLflow run."""
    from cts.report.build import ReportSettings, build_sweep_report, log_sweep_report
    from cts.stats.bootstrap import Resampling

    bootstrap = Resampling(config.bootstrap.n_resamples, config.bootstrap.confidence, config.seed)
    result = build_sweep_report(config.hydra.sweep.dir, settings=ReportSettings(bootstrap))
    if result.ok:  # build_sweep_report said where it wrote the report: once on the console
        log_sweep_report(result, config.tracking.uri, config.tracking.experiment)
    return result


def min_scored(config: DictConfig) -> float | None:
    """``min_scored`` of ``config`` (0 when it predates the key: a run that measured nothing fails)."""
    value = OmegaConf.select(config, "min_scored", default=0)
    return None if value is None else float(value)


def _report(config: DictConfig, n_jobs: int) -> Path:
    """The sweep's report dir: built now, unless a process of the same sweep dir that ended first wrote it."""
    from cts.sweep._shared import written_report

    written = written_report(Path(str(config.hydra.sweep.dir)))
    if written is not None:
        print(f"cts: the sweep report was written by another process of this sweep dir: {written}", flush=True)
        return written.parent
    return report_or_exit(config, n_jobs)


def check_scored_sweep(config: DictConfig) -> None:
    """Exit 3 when a job of the sweep measured too little (:mod:`cts.compose.scored`), after the closing lines.

    The Slurm report job checks it too (:func:`hydra_plugins.cts_slurm_launcher.cluster.report_job`).

    Raises:
        ScoredTooLittle: One line naming how many jobs and the worst ones.
    """
    from cts.report.jobs import job_dirs

    sweep_dir = Path(str(config.hydra.sweep.dir))
    check_sweep(job_dirs(sweep_dir) if sweep_dir.is_dir() else [], min_scored(config))


def _tracked_run(job_dir: Path, config: DictConfig) -> tuple[str | None, str, str]:
    """The run id, experiment and store a job's ``summary.json`` names (the config's when it has none)."""
    path = job_dir / "summary.json"
    summary = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    experiment = summary.get("experiment") or str(config.tracking.experiment)
    return summary.get("run_id"), experiment, summary.get("tracking_uri") or str(config.tracking.uri)
