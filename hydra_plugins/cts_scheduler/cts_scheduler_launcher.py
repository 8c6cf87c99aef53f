"""The ``cts`` launcher (``hydra/launcher=cts``): all jobs of a multirun at once, one schedule.

Each job still goes through Hydra's own ``run_job`` (its dir, ``.hydra`` configs,
return value) and cts's task (records, resume, MLflow run, metrics); the
:class:`cts.sweep.SweepSession` makes them share one event loop, one LLM
runtime, one capacity per endpoint and one orig arm per instance. A failing job
does not stop the others (Hydra reports it after the batch, so the sweep exits
non-zero); Ctrl-C stops every job, keeping what each has written.
"""


import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

log = logging.getLogger(__name__)
_POLL_S = 0.2


@dataclass
class CtsLauncherConf:
    """``hydra/launcher=cts``."""

    _target_: str = "hydra_plugins.cts_scheduler.cts_scheduler_launcher.CtsLauncher"
    progress: bool = True
    """One progress bar for the sweep (instances done / total, requests, USD)."""
    job_concurrency: Optional[int] = 32
    """Instances in flight per job (sets each job's ``concurrency``; null keeps it). The endpoint
    limiters bound the calls; jobs that share work (same UA questions, rewrites, orig arm) move
    in lockstep, so each needs more instances in flight than alone to keep the endpoints full."""


ConfigStore.instance().store(group="hydra/launcher", name="cts", node=CtsLauncherConf, provider="cts")


class CtsLauncher(Launcher):
    """Launch every job of a batch concurrently in this process (see the module docstring)."""

    def __init__(self, progress: bool = True, job_concurrency: Optional[int] = 32) -> None:
        self.progress = progress
        self.job_concurrency = job_concurrency
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        """Keep what :meth:`launch` needs (called by Hydra)."""
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Run the jobs at once; return their results in order."""
        from cts.sweep import SweepSession

        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs on one cts schedule")
        configs = [self._job_config(initial_job_idx + i, o) for i, o in enumerate(job_overrides)]
        results: list[JobReturn | None] = [None] * len(configs)
        with SweepSession(progress=self.progress) as session:
            threads = [threading.Thread(target=self._run_one, args=(session, c, results, i), name=f"cts-job-{i}")
                       for i, c in enumerate(configs)]
            for thread in threads:
                thread.start()
            _join_all(threads, session)
            counts = session.orig_counts()
        log.info("orig arm: %(orig_computed)d computed, %(orig_shared)d reused by other jobs", counts)
        HydraConfig.instance().set_config(self.config)
        return [r if r is not None else _failed(RuntimeError("job did not return")) for r in results]

    def _job_config(self, idx: int, overrides: Sequence[str]) -> DictConfig:
        assert self.config is not None and self.hydra_context is not None
        log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
        config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = idx
            config.hydra.job.num = idx
            if self.job_concurrency is not None and "concurrency" in config:
                config.concurrency = self.job_concurrency
        return config

    def _run_one(self, session: Any, config: DictConfig, results: list[JobReturn | None], i: int) -> None:
        assert self.hydra_context is not None and self.task_function is not None
        try:
            with session.job_turn():
                # Hydra's logging set-up is process-global: configured once, by the launcher.
                results[i] = run_job(hydra_context=self.hydra_context, task_function=self.task_function,
                                     config=config, job_dir_key="hydra.sweep.dir",
                                     job_subdir_key="hydra.sweep.subdir", configure_logging=False)
        except BaseException as exc:  # noqa: BLE001 - SystemExit or Ctrl-C in one job: record, keep the others
            results[i] = _failed(exc, list(config.hydra.overrides.task))
        ret = results[i]
        if ret is not None and ret.status == JobStatus.FAILED:
            log.error("job #%d (%s) failed: %r", i, " ".join(config.hydra.overrides.task), ret._return_value)


def _join_all(threads: list[threading.Thread], session: Any) -> None:
    """Wait for every job; on Ctrl-C stop them all, wait for their clean-up, then re-raise."""
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(_POLL_S)
    except KeyboardInterrupt:
        log.warning("interrupted: stopping every job of the sweep (finished records are kept)")
        session.cancel()
        for thread in threads:
            thread.join()
        raise


def _failed(exc: BaseException, overrides: list[str] | None = None) -> JobReturn:
    ret = JobReturn(overrides=overrides, status=JobStatus.FAILED)
    ret.return_value = exc
    return ret
