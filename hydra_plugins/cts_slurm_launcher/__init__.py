"""cts's Slurm launcher: submitit's, refusing literal secrets and reporting every job (see cts.cluster)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from omegaconf import OmegaConf

from cts.cluster import job_return, refuse_literal_secrets, use_scontrol_when_no_sacct


class SlurmLauncher(submitit_launcher.SlurmLauncher):
    """submitit's Slurm launcher: refuses literal secrets, waits for every job, reports failures."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Submit the jobs as one Slurm array and return when every one has ended."""
        assert self.config is not None
        # Unresolved: reading the list's items would resolve ${oc.env:...} into the secret itself.
        task = OmegaConf.to_container(self.config.hydra.overrides.task, resolve=False)
        refuse_literal_secrets([*task, *(o for job in job_overrides for o in job)])
        use_scontrol_when_no_sacct()
        jobs = self._submit(job_overrides, initial_job_idx)
        for job in jobs:
            job.wait()
        return [job_return(job, overrides) for job, overrides in zip(jobs, job_overrides)]

    def _submit(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
        # The parent's launch() submits, then collects results in one list comprehension
        # (the first failure raises before the others are waited for): reuse its
        # submission and keep the jobs that map_array returns.
        import submitit

        captured: list[Any] = []
        original = submitit.AutoExecutor.map_array

        def capture(executor: Any, *args: Any, **kwargs: Any) -> list[Any]:
            captured.extend(original(executor, *args, **kwargs))
            return []

        submitit.AutoExecutor.map_array = capture  # type: ignore[method-assign]
        try:
            super().launch(job_overrides, initial_job_idx)
        finally:
            submitit.AutoExecutor.map_array = original  # type: ignore[method-assign]
        return captured
