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
- **clusters without accounting**: where ``sacct`` is unavailable (no slurmdbd),
  job states come from ``scontrol``, so a cancelled job is seen as ended.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn, JobStatus

from cts.secrets import has_url_password, is_secret_key

log = logging.getLogger(__name__)



def literal_secrets(overrides: Sequence[str]) -> list[str]:
    """Command-line overrides that would write a secret into the launcher's files.

    A value that interpolates the environment (``${oc.env:VAR}``) is fine: submitit
    pickles the config unresolved. A literal value, or a URL with a password, is not.
    """
    found = []
    for override in overrides:
        key, _, value = override.partition("=")
        value = value.replace("\\", "")  # Hydra's sweeper escapes the jobs' values: $\{oc.env\:VAR\}
        literal = bool(value) and "${" not in value and value.lower() != "null"
        if (is_secret_key(key) and literal) or has_url_password(value):
            found.append(key)
    return found


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
    try:
        return job.results()[0]
    except Exception as exc:  # noqa: BLE001 - any job failure is reported, not raised here
        log.error(
            "Slurm job %s (%s) ended %s; logs: %s %s",
            job.job_id, " ".join(overrides), job.state, job.paths.stdout, job.paths.stderr,
        )
        ret = JobReturn(overrides=list(overrides), status=JobStatus.FAILED)
        ret._return_value = exc
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


class _ScontrolFallbackWatcher(_watcher_base()):  # type: ignore[misc]
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
