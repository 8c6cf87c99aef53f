"""The ``cts`` launcher (``hydra/launcher=cts``): all jobs of a multirun at once, one schedule.

Each job still goes through Hydra's own ``run_job`` (its dir, ``.hydra`` configs,
return value) and cts's task (records, resume, MLflow run, metrics); the
:class:`cts.sweep.SweepSession` makes them share one event loop, one LLM
runtime, one capacity per endpoint and one orig arm per instance. A failing job
does not stop the others (Hydra reports it after the batch, so the sweep exits
non-zero); Ctrl-C or SIGTERM stops every job, keeping what each has written, and
the sweep says so once, with the command that resumes it, and exits 130 / 143.
Each job logs to ``<job dir>/<task name>.log`` as under the basic launcher
(:mod:`cts.sweep._joblog`).
"""

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hydra.core.config_loader import ConfigLoader
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import (
    JobReturn,
    JobStatus,
    configure_log,
    filter_overrides,
    run_job,
    setup_globals,
)
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from cts._util.launch import Launch

log = logging.getLogger(__name__)
_POLL_S = 0.2


@dataclass
class CtsLauncherConf:
    """``hydra/launcher=cts``."""

    _target_: str = "hydra_plugins.cts_scheduler.cts_scheduler_launcher.CtsLauncher"
    progress: bool = True
    """One progress bar for the sweep (instances done / total, requests, USD)."""
    job_concurrency: int | None = 64
    """Instances in flight per job (sets each job's ``concurrency``; null keeps it). The endpoint
    limiters bound the calls; jobs that share work (same UA questions, rewrites, orig arm) move
    in lockstep, so each needs more instances in flight than alone to keep the endpoints full.
    With 32, a sweep's last instances started late and its end ran below the endpoints'
    capacity (the sweep benchmark's request phase was about 1 s longer)."""


ConfigStore.instance().store(group="hydra/launcher", name="cts", node=CtsLauncherConf, provider="cts")


class CtsLauncher(Launcher):
    """Launch every job of a batch concurrently in this process (see the module docstring)."""

    opens_store_in_jobs = True
    """Jobs open the MLflow store here, in turn (``cts.compose.launch.jobs.jobs_open_store_here``)."""

    def __init__(self, progress: bool = True, job_concurrency: int | None = 64) -> None:
        self.progress = progress
        self.job_concurrency = job_concurrency
        self.config: DictConfig | None = None
        self._launch: Launch | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        """Keep what :meth:`launch` needs (called by Hydra), and take the launch from the callbacks.

        The sweeper and this launcher share ``hydra_context``: its loader is wrapped so that
        each job's config, composed by the pre-flight into the launch's memo, is not composed
        again (``cts.sweep._compose``).
        """
        from cts.sweep._compose import ComposedJobs, MemoConfigLoader

        self._launch = _launch_of(hydra_context, config)
        if self._launch.composed is None:
            self._launch.composed = ComposedJobs()
        loader = hydra_context.config_loader
        inner = loader.inner if isinstance(loader, MemoConfigLoader) else loader  # an earlier launch's wrapper
        # Duck-typed: it delegates everything but load_sweep_config to the loader it wraps.
        hydra_context.config_loader = cast(ConfigLoader, MemoConfigLoader(inner, self._launch.composed))
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Run the jobs at once; return their results in order."""
        from cts._util.interrupt import sweep_signals
        from cts.sweep import SweepSession
        from cts.sweep._joblog import routed_job_logs

        assert self.config is not None and self.hydra_context is not None and self._launch is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs on one cts schedule in {sweep_dir}")
        for i, o in enumerate(job_overrides):
            log.info(f"\t#{initial_job_idx + i} : {' '.join(filter_overrides(o))}")
        jobs = [(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]  # each composed in its turn
        results: list[JobReturn | None] = [None] * len(jobs)
        with (
            routed_job_logs(_file_format(self.config)) as router,
            self._launch.bound() as launch,
            SweepSession(progress=self.progress) as session,  # launch.session
            sweep_signals(launch),  # the jobs print no resume command: _stopped prints the sweep's
        ):
            session.expect_jobs(len(jobs))
            ended = [threading.Event() for _ in jobs]
            threads = [  # each job runs in a context of its own where only the launch is bound
                threading.Thread(
                    target=launch.context().run,
                    name=f"cts-job-{i}",
                    args=(_then_set, ended[i], self._run_one, session, router, job, results, i),
                )
                for i, job in enumerate(jobs)
            ]
            for thread in threads:
                thread.start()
            interrupted = _join_all(threads, ended, session)
            counts = session.orig_counts()
        HydraConfig.instance().set_config(self.config)
        returns = [r if r is not None else _failed(RuntimeError("job did not return")) for r in results]
        if interrupted:
            raise SystemExit(_stopped(str(sweep_dir), len(returns)))
        log.info("orig arm: %(orig_computed)d computed, %(orig_shared)d reused by other jobs", counts)
        _report_failures(returns, str(sweep_dir))
        return returns

    def _job_config(self, idx: int, overrides: Sequence[str]) -> DictConfig:
        assert self.config is not None and self.hydra_context is not None
        loader = self.hydra_context.config_loader
        take = getattr(loader, "take_sweep_config", loader.load_sweep_config)  # ours to change: run_job copies it
        config = take(self.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = idx
            config.hydra.job.num = idx
            if self.job_concurrency is not None and "concurrency" in config and not _sets_concurrency(overrides):
                config.concurrency = self.job_concurrency
        return config

    def _run_one(
        self, session: Any, router: Any, job: tuple[int, list[str]], results: list[JobReturn | None], i: int
    ) -> None:
        assert self.hydra_context is not None and self.task_function is not None
        task_function = self.task_function

        def logged_task(cfg: DictConfig) -> Any:
            # run_job has made the job dir and set HydraConfig to this job (we hold the turn).
            hc = HydraConfig.get()
            with router.job(Path(str(hc.runtime.output_dir)), str(hc.job.name)):
                return task_function(cfg)

        overrides = job[1]
        try:
            with session.job_turn():
                # Composed here, in the job's turn: the first job starts before the others are composed.
                config = self._job_config(*job)
                overrides = list(config.hydra.overrides.task)
                # Hydra's logging set-up is process-global: configured once, by the launcher.
                results[i] = run_job(
                    hydra_context=self.hydra_context,
                    task_function=logged_task,
                    config=config,
                    job_dir_key="hydra.sweep.dir",
                    job_subdir_key="hydra.sweep.subdir",
                    configure_logging=False,
                )
        except BaseException as exc:  # noqa: BLE001 - SystemExit or Ctrl-C in one job: record, keep the others
            results[i] = _failed(exc, overrides)
        ret = results[i]
        if ret is not None and ret.status == JobStatus.FAILED and not _interrupted(ret._return_value):
            log.error("job #%d (%s) failed: %s", i, " ".join(overrides), _why(ret._return_value))


def _launch_of(hydra_context: HydraContext, config: DictConfig) -> Launch:
    """The launch the callbacks began (:class:`cts.compose.callbacks.LaunchCallbacks`), else one begun here as they would.

    Hydra hands the callbacks to the launcher in ``hydra_context.callbacks``; a config without
    them (``hydra.callbacks`` emptied) gets a launch of this sweep's dir, swept keys and resume command.
    """
    from cts.compose.callbacks import LaunchCallbacks
    from cts.compose.launch.steps import sweep_launch

    for callback in getattr(hydra_context.callbacks, "callbacks", ()):
        if isinstance(callback, LaunchCallbacks) and callback.launch is not None:
            return callback.launch
    return sweep_launch(config)


def _then_set(ended: threading.Event, target: Any, *args: Any) -> None:
    """Run ``target(*args)`` (a job's thread), then say it has ended."""
    try:
        target(*args)
    finally:
        ended.set()


def _join_all(threads: list[threading.Thread], ended: list[threading.Event], session: Any) -> bool:
    """Wait for every job; on Ctrl-C (or SIGTERM) stop them all and wait for their clean-up.

    The wait polls each job's ``ended`` flag rather than ``Thread.join``: a Ctrl-C that interrupts
    ``join`` marks a thread that still runs as dead before Python 3.12 (CPython gh-90882), and the
    process then exits under that job, leaving its MLflow run ``RUNNING``.

    Returns:
        Whether the sweep was interrupted.
    """
    try:
        _wait_until_set(ended)
        interrupted = False
    except KeyboardInterrupt:
        log.warning("interrupted: stopping every job of the sweep (finished records are kept)")
        session.cancel()
        while True:
            try:
                _wait_until_set(ended)
                break
            except KeyboardInterrupt:  # a second Ctrl-C while jobs clean up is ignored
                log.warning("still stopping: each job is ending its MLflow run")
        interrupted = True
    for thread in threads:  # every job has ended; its thread only returns
        with contextlib.suppress(KeyboardInterrupt):
            thread.join()
    return interrupted


def _wait_until_set(events: list[threading.Event]) -> None:
    """Sleep until every event is set (a sleep, unlike a lock wait, is safe to interrupt)."""
    while not all(e.is_set() for e in events):
        time.sleep(_POLL_S)


def _job_name(ret: JobReturn, i: int) -> str:
    """A job as its dir's name (the swept factors), else its overrides."""
    out = OmegaConf.select(ret.hydra_cfg, "hydra.runtime.output_dir", default=None) if ret.hydra_cfg else None
    return Path(str(out)).name if out else " ".join(ret.overrides or ()) or f"#{i}"


def _stopped(sweep_dir: str, n_jobs: int) -> int:
    """Say once that the sweep was stopped, and how to resume it; the exit status (130 SIGINT, 143 SIGTERM)."""
    import signal

    from cts._util.interrupt import resume_command, stop_signal

    signum = stop_signal()
    command = resume_command(sys.argv[1:], Path(sweep_dir), sweep_dir)
    print(
        f"cts: sweep stopped by {signal.Signals(signum).name} ({n_jobs} jobs in {sweep_dir}, finished records "
        f"kept); resume with: {command}",
        file=sys.stderr,
        flush=True,
    )
    return 128 + signum


def _report_failures(returns: Sequence[JobReturn], sweep_dir: str) -> None:
    """Log the failed jobs; Hydra then raises the first one's error (an incomplete job's names the resume command)."""
    from cts._util.interrupt import resume_command
    from cts.protocol.outcome import JobIncomplete

    failed = [(i, r) for i, r in enumerate(returns) if r.status == JobStatus.FAILED]
    if not failed:
        return
    log.error("%d of %d jobs failed: %s", len(failed), len(returns), "; ".join(_job_name(r, i) for i, r in failed))
    incomplete = [r for _, r in failed if isinstance(r._return_value, JobIncomplete)]
    if incomplete and not isinstance(failed[0][1]._return_value, JobIncomplete):  # Hydra shows another error
        log.error("resume the sweep with: %s", resume_command(sys.argv[1:], Path(sweep_dir), sweep_dir))


def _interrupted(error: Any) -> bool:
    """Whether a job ended because the sweep was stopped (it said so itself)."""
    return isinstance(error, KeyboardInterrupt) or (
        isinstance(error, SystemExit) and isinstance(error.code, int) and error.code > 128
    )


def _why(error: Any) -> str:
    """A failed job's error in one line (an incomplete job's without the sweep's resume command)."""
    from cts.protocol.outcome import JobIncomplete

    return error.headline if isinstance(error, JobIncomplete) else repr(error)


def _file_format(config: DictConfig) -> str:
    """The line format of Hydra's per-job log file (``hydra.job_logging``), or its default."""
    from cts.sweep._joblog import DEFAULT_FORMAT

    fmt = OmegaConf.select(config, "hydra.job_logging.formatters.simple.format", default=None)
    return str(fmt) if fmt else DEFAULT_FORMAT


def _failed(exc: BaseException, overrides: list[str] | None = None) -> JobReturn:
    ret = JobReturn(overrides=overrides, status=JobStatus.FAILED)
    ret.return_value = exc
    return ret


def _sets_concurrency(overrides: Sequence[str]) -> bool:
    """Whether the user set ``concurrency`` on the command line (it then wins over ``job_concurrency``)."""
    from cts._util.naming import factors

    return "concurrency" in factors(overrides)
