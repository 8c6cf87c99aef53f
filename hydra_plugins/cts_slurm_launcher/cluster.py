"""Slurm through Hydra's submitit launcher, with what a sweep needs on a cluster.

``hydra/launcher=slurm`` (``conf/hydra/launcher/slurm.yaml``) selects the launcher
plugin ``hydra_plugins.cts_slurm_launcher`` (Hydra only instantiates launchers from
the ``hydra_plugins`` package), which is submitit's Slurm launcher plus what this
module provides:

- **secrets stay in the environment**: submitit pickles the sweep's Hydra config
  (overrides included) into its folder, so a literal key or password on the command
  line is refused before anything is queued; jobs inherit the submitting shell's
  environment (``sbatch``'s default ``--export=ALL``) and read keys from it.
- **one failed job does not stop the others**: the launcher waits for every job, logs
  each failure with its Slurm id and log files, then reports it to Hydra.
- **the report is a dependent step**: after the array, one small job queued with
  ``--dependency=afterany:<array>`` builds the sweep report and logs it to MLflow
  (:func:`report_job`, the multirun callback's :func:`cts.compose.launch.report.report_sweep`),
  so it appears even if the submitting shell dies. With ``hydra.launcher.wait=false``
  the submitter returns once everything is queued (:func:`announce_queued`).
- **clusters without accounting**: where ``sacct`` is unavailable (no slurmdbd),
  job states come from ``scontrol``, so a cancelled job is seen as ended.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus

from cts._util.secrets import literal_secrets

log = logging.getLogger(__name__)
REPORT_JOB_NAME = "cts-sweep-report"
_KILLED = ("CANCELLED", "TIMEOUT", "OUT_OF_MEMORY")  # states in which Slurm ended the job, not Python


def refuse_literal_secrets(overrides: Sequence[str]) -> None:
    """Raise ValueError naming the overrides that would write a secret into the submitit folder."""
    secrets = literal_secrets(overrides)
    if secrets:
        raise ValueError(
            f"refusing to submit: {', '.join(sorted(set(secrets)))} given literally on the command line would be "
            "written into the submitit folder; export the secret and pass e.g. key='${oc.env:MY_KEY}' instead"
        )


def job_return(job: Any, overrides: Sequence[str]) -> JobReturn:
    """The job's Hydra result; a failed or cancelled job is logged with its log files and returned FAILED."""
    if not job.paths.result_pickle.exists() and str(job.state).startswith(_KILLED):
        # Slurm killed it, so no result file is coming: skip submitit's 15 s wait for a slow filesystem.
        job._results_timeout_s = 0
    try:
        return job.results()[0]
    except Exception as exc:  # noqa: BLE001 - any job failure is reported, not raised here
        log.error(
            "Slurm job %s (%s) ended %s; logs: %s %s",
            job.job_id,
            " ".join(overrides),
            job.state,
            job.paths.stdout,
            job.paths.stderr,
        )
        ret = JobReturn(overrides=list(overrides), status=JobStatus.FAILED)
        ret._return_value = exc
        return ret


def report_job(sweep_dir: str) -> str:
    """Body of the dependent Slurm step: build and log the report of the sweep in ``sweep_dir``.

    Reads the sweep's config from the ``multirun.yaml`` Hydra saved there before the
    jobs were queued (unresolved, so nothing secret is pickled into the job: the
    tracking URI and the rest resolve here, in the job's own environment).

    Then, like the sweep's own end, it applies ``min_scored`` (:mod:`cts.compose.scored`): a job
    that measured too little ends the report job with the same ``cts: sweep FAILED: ...`` line and
    exit status 3, the report being written (so ``--dependency=afterok`` on it waits for a sweep
    that measured what it should).

    Returns:
        The path of ``report.md``.

    Raises:
        RuntimeError: when the report could not be built (the errors are in the job's log).
    """
    from omegaconf import DictConfig, OmegaConf, open_dict, read_write

    from cts.compose.launch.report import check_scored_sweep, report_sweep
    from cts.core.errors import exit_on_error

    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    config = OmegaConf.load(Path(sweep_dir) / "multirun.yaml")
    assert isinstance(config, DictConfig)  # Hydra writes the sweep's config as a mapping
    with read_write(config), open_dict(config):
        config.hydra.sweep.dir = sweep_dir  # saved unresolved (${now:...}); this is the sweep's real dir
    out_dir = report_sweep(config)
    if out_dir is None:
        raise RuntimeError(f"the sweep report of {sweep_dir} could not be built (errors above)")
    report = str(out_dir / "report.md")
    with exit_on_error(), _result_kept(report):
        check_scored_sweep(config)
    return report


@contextlib.contextmanager
def _result_kept(result: str) -> Iterator[None]:
    """Keep ``result`` as the submitit job's result when the block ends it with a cts exit status.

    submitit writes a job's result only when its function returns, and a returning job exits 0;
    the report job that exits 3 writes it here, so the waiting submitter still logs where the report is.
    """
    from cts.core.errors import CtsError

    try:
        yield
    except CtsError:
        if os.environ.get("SUBMITIT_FOLDER"):  # in a submitit job (not when called in-process)
            from submitit import JobEnvironment
            from submitit.core.utils import cloudpickle_dump, temporary_save_path

            with temporary_save_path(JobEnvironment().paths.result_pickle) as tmp:
                cloudpickle_dump(("success", result), tmp)
        raise


def submit_report_job(executor: Any, array_ids: Sequence[str], sweep_dir: str, params: Mapping[str, Any]) -> Any:
    """Queue :func:`report_job` to start when every job of ``array_ids`` has ended (``afterany``).

    ``executor`` is the submitit executor of the sweep's array (same partition, account,
    environment); the report job takes one CPU and no array slot.
    """
    extra = dict(params.get("additional_parameters") or {})
    extra["dependency"] = "afterany:" + ":".join(array_ids)
    executor.update_parameters(name=REPORT_JOB_NAME, cpus_per_task=1, slurm_additional_parameters=extra)
    return executor.submit(report_job, str(Path(sweep_dir).resolve()))


def cancel_pending(job: Any) -> None:
    """Cancel a report job a later batch of the same sweep supersedes, if it has not run yet."""
    if job is not None:
        subprocess.run(["scancel", "--state=PENDING", str(job.job_id)], capture_output=True)


def report_outcome(job: Any) -> None:
    """Wait for the report job and log where the report is, or that it failed and where its logs are."""
    job.wait()
    try:
        log.info("sweep report written to %s by Slurm job %s", job.result(), job.job_id)
    except Exception:  # noqa: BLE001 - the report job's failure is logged, the sweep's results stand
        log.error(
            "Slurm report job %s ended %s; logs: %s %s", job.job_id, job.state, job.paths.stdout, job.paths.stderr
        )


def announce_queued(jobs: Sequence[Any], report: Any, sweep_dir: str) -> None:
    """Say what was queued and where the report will appear (``wait=false``: the submitter returns now)."""
    arrays = sorted({str(job.job_id).split("_")[0] for job in jobs})
    log.info("queued %d jobs as Slurm array %s; not waiting (hydra.launcher.wait=false)", len(jobs), ",".join(arrays))
    if report is not None:
        log.info(
            "sweep report: Slurm job %s (after array %s) writes %s and logs it to MLflow",
            report.job_id,
            ",".join(arrays),
            Path(sweep_dir).resolve() / "report" / "report.md",
        )
    log.info("follow with: squeue -j %s", ",".join([*arrays, *([str(report.job_id)] if report else [])]))


def queued_return(overrides: Sequence[str]) -> JobReturn:
    """What Hydra gets for a job queued without waiting: COMPLETED with no value (it has not run yet)."""
    ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
    ret._return_value = None
    return ret


def use_scontrol_when_no_sacct() -> None:
    """Make submitit read job states from ``scontrol`` when ``sacct`` fails."""
    from submitit.slurm import slurm

    if not isinstance(slurm.SlurmJob.watcher, _ScontrolFallbackWatcher):
        slurm.SlurmJob.watcher = _ScontrolFallbackWatcher(delay_s=15)


def _scontrol_states(job_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """``{submitit job id: {"State": ...}}`` from ``scontrol show job -o``; ended jobs it forgot are ``GONE``."""
    info: dict[str, dict[str, str]] = {}
    for array_id in sorted({job_id.split("_")[0] for job_id in job_ids}):
        out = subprocess.run(["scontrol", "-o", "show", "job", array_id], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            state = {"State": fields.get("JobState", "UNKNOWN"), "NodeList": fields.get("NodeList", "")}
            tasks = _array_tasks(fields.get("ArrayTaskId", ""))
            keys = [f"{fields.get('ArrayJobId')}_{t}" for t in tasks] if tasks else [fields.get("JobId", "")]
            info.update({key: {"JobID": key, **state} for key in keys})
    for job_id in job_ids:
        info.setdefault(job_id, {"JobID": job_id, "State": "GONE", "NodeList": ""})
    return info


def _array_tasks(spec: str) -> list[int]:
    """Task ids of a Slurm array spec like ``3``, ``0-8%2`` or ``1,4-6``."""
    tasks: list[int] = []
    for part in spec.split("%")[0].split(","):
        low, _, high = part.partition("-")
        if low.isdigit():
            tasks.extend(range(int(low), int(high or low) + 1))
    return tasks


def _watcher_base() -> type:
    from submitit.slurm.slurm import SlurmInfoWatcher

    return SlurmInfoWatcher


class _ScontrolFallbackWatcher(_watcher_base()):  # type: ignore[misc]  # a base imported lazily
    """submitit's watcher; when ``sacct`` fails (no accounting), states come from ``scontrol``."""

    _no_sacct = False

    def update(self) -> None:
        if not self._no_sacct:
            self._output = None
            super().update()  # logs and swallows a failed sacct, leaving _output unset
            if self._output is not None:
                return
            type(self)._no_sacct = True  # ask scontrol from now on
        pending = sorted(self._registered - self._finished)
        self._info_dict.update(_scontrol_states(pending))
        for job_id in pending:
            if self.is_done(job_id, mode="cache"):
                self._finished.add(job_id)
