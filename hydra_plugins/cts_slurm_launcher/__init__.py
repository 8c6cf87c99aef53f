"""cts's Slurm launcher: submitit's, refusing literal secrets, reporting every job, the report as a dependent job.

See hydra_plugins.cts_slurm_launcher.cluster. ``hydra/launcher=slurm`` (conf/hydra/launcher/slurm.yaml) extends the
``cts_slurm`` schema registered here: submitit's Slurm options plus ``wait``.
"""

# No `from __future__ import annotations`: Hydra's plugin scan executes this module outside
# sys.modules, where @dataclass cannot resolve string annotations.
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
from omegaconf import OmegaConf, open_dict, read_write

from cts.compose.schema import Config, default_of
from hydra_plugins.cts_slurm_launcher.cluster import (
    announce_queued,
    cancel_pending,
    job_return,
    queued_return,
    refuse_literal_secrets,
    report_outcome,
    submit_report_job,
    use_scontrol_when_no_sacct,
)


@dataclass  # not frozen: it subclasses submitit's (mutable) schema, which command-line overrides merge into
class CtsSlurmQueueConf(SlurmQueueConf):
    """submitit's Slurm options, plus whether the submitting command waits for the sweep."""

    _target_: str = "hydra_plugins.cts_slurm_launcher.SlurmLauncher"
    wait: bool = True
    """True: return when every job and the report job have ended; False: return once queued."""


ConfigStore.instance().store(group="hydra/launcher", name="cts_slurm", node=CtsSlurmQueueConf, provider="cts")


class SlurmLauncher(submitit_launcher.SlurmLauncher):
    """submitit's Slurm launcher: refuses literal secrets, reports every job, queues the report after them."""

    def __init__(self, wait: bool = True, **params: Any) -> None:
        super().__init__(**params)
        self.wait = wait
        self._arrays: list[str] = []
        self._report: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # Each array job unpickles this launcher: it needs no handle on the report job.
        return {**self.__dict__, "_report": None}

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Submit the jobs as one Slurm array and the report job after it; wait for them unless ``wait=false``."""
        assert self.config is not None
        # Unresolved: reading the list's items would resolve ${oc.env:...} into the secret itself.
        task = OmegaConf.to_container(self.config.hydra.overrides.task, resolve=False)
        assert isinstance(task, list)  # hydra.overrides.task is a list of strings
        refuse_literal_secrets([*task, *(o for job in job_overrides for o in job)])
        use_scontrol_when_no_sacct()
        executor, jobs = self._submit(job_overrides, initial_job_idx)
        self._arrays.append(str(jobs[0].job_id).split("_")[0])
        sweep_dir = str(self.config.hydra.sweep.dir)
        if self._report is not None or self.config.get("sweep_report", default_of(Config, "sweep_report")):
            cancel_pending(self._report)  # an earlier batch's report: this one covers every array so far
            self._report = submit_report_job(executor, self._arrays, sweep_dir, self.params)
            with read_write(self.config), open_dict(self.config):
                self.config.sweep_report = False  # the multirun callback must not build it a second time
        if not self.wait:
            announce_queued(jobs, self._report, sweep_dir)
            return [queued_return(overrides) for overrides in job_overrides]
        for job in jobs:
            job.wait()
        returns = [job_return(job, overrides) for job, overrides in zip(jobs, job_overrides)]
        if self._report is not None:
            report_outcome(self._report)
        return returns

    def _submit(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> tuple[Any, list[Any]]:
        # The parent's launch() submits, then collects results in one list comprehension
        # (the first failure raises before the others are waited for): reuse its
        # submission and keep the executor and the jobs that map_array returns.
        import submitit

        captured: list[Any] = []
        original = submitit.AutoExecutor.map_array

        def capture(executor: Any, *args: Any, **kwargs: Any) -> list[Any]:
            captured.append(executor)
            captured.extend(original(executor, *args, **kwargs))
            return []

        # The wrapper takes what map_array takes; mypy sees only the two signatures differ.
        submitit.AutoExecutor.map_array = capture  # type: ignore[method-assign,assignment]  # see above
        try:
            super().launch(job_overrides, initial_job_idx)
        finally:
            submitit.AutoExecutor.map_array = original  # type: ignore[method-assign]  # restored
        return captured[0], captured[1:]
