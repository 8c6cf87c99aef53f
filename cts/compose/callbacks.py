"""Hydra callbacks of a launch (:class:`LaunchCallbacks`): everything before the jobs and after them.

Before: the start-up checks, the pre-flight, the endpoint and completion probes, the plan and
the MLflow store; after: the sweep report and the closing lines. The callbacks own the launch
(:class:`cts._util.launch.Launch`): they create it first and end it last.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from cts import tracking
from cts._util.console import job_closing_lines, sweep_closing_lines
from cts._util.interrupt import hydra_quote, resume_command
from cts._util.launch import Launch, unbind
from cts._util.naming import register_resolver, swept_keys
from cts.compose.schema import Config, default_of
from cts.compose.scored import check_job, check_sweep
from cts.compose.secret_files import hide_written_secrets, remember_secrets, warn_literal_secrets
from cts.core.errors import ConfigError, LaunchDone, ReportFailed, exit_on_error

if TYPE_CHECKING:
    from cts.report import ReportResult
    from cts.sweep._compose import ComposedJobs

log = logging.getLogger(__name__)
# Hydra imports this module (to build the callbacks) in the launching process and in
# launcher workers before any job's sub-dir is resolved: the naming resolver must exist by then.
register_resolver()


def sweep_job_configs(config: DictConfig, composed: ComposedJobs) -> list[DictConfig]:
    """The composed config of every job the sweep will launch, without launching any.

    Expands the command line's sweep overrides the way Hydra's basic sweeper does and
    composes each job's config with Hydra's own loader, so the pre-flight sees e.g.
    ``clarifier=gpt`` as well as ``clarifier=claude`` before the first job starts.

    Args:
        config: The sweep's config.
        composed: The launch's compose memo (the sweeper and the cts launcher do not compose again).
    """
    parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    loader = GlobalHydra.instance().config_loader()
    return [composed.compose(loader, config, job) for job in sweep_jobs(parsed)]


def sweep_jobs(overrides: list[Override]) -> list[list[str]]:
    """The override list of every job of a sweep: the cartesian product of sweep values."""
    choices = []
    for o in overrides:
        key = o.get_key_element()
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        choices.append([f"{key}={v}" for v in values])
    return [list(job) for job in itertools.product(*choices)]


def traced_store(config: DictConfig) -> str | None:
    """The tracking URI when ``config`` asks for instance traces, read before any check (None on doubt).

    A value the checks would refuse reads as None: the writer started for it is only a head start.
    """
    wanted = OmegaConf.select(config, "tracking.instance_traces", default=None, throw_on_resolution_failure=False)
    uri = OmegaConf.select(config, "tracking.uri", default=None, throw_on_resolution_failure=False)
    return uri if wanted is True and isinstance(uri, str) and uri else None


def jobs_open_store_here(config: DictConfig) -> bool:
    """Whether the sweep's launcher runs every job in this process, one after another at the store.

    Such a launcher (its class sets ``opens_store_in_jobs = True``, as ``hydra/launcher=cts`` does)
    needs no preparation before the launch: the first job opens the store, under the same lock,
    while its first requests are already in flight, and a broken store fails it and the jobs after it.
    """
    from hydra.utils import get_class

    target = OmegaConf.select(config, "hydra.launcher._target_", default=None)
    try:
        return bool(target) and bool(getattr(get_class(str(target)), "opens_store_in_jobs", False))
    except (ImportError, ValueError):
        return False


def pin_sweep_dir(config: DictConfig) -> str:
    """Resolve the sweep dir once, absolute, and pin it into the sweep's config for every job.

    Hydra resolves ``hydra.sweep.dir`` (``${now:...}``) in each job's config again, when the
    job starts unless the launcher composed the job after the sweep's own value was resolved:
    the cts launcher's jobs landed in as many dirs as seconds the sweep took to start them.
    The value is set in the sweep's config and appended to ``hydra.overrides.hydra``, which
    every launcher (cts, basic, joblib, Slurm) applies when it composes a job's config.

    Returns:
        The sweep dir.
    """
    sweep_dir = os.path.abspath(str(config.hydra.sweep.dir))  # resolving it fills the ${now:} cache jobs copy
    pinned = f"hydra.sweep.dir={hydra_quote(sweep_dir)}"
    given = OmegaConf.to_container(config.hydra.overrides.hydra, resolve=False)  # e.g. subdir=job${hydra:job.num}
    assert isinstance(given, list)
    hydra_overrides = [o for o in given if str(o).lstrip("+~").split("=", 1)[0] != "hydra.sweep.dir"]
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.sweep.dir = sweep_dir
        config.hydra.overrides.hydra = [*hydra_overrides, pinned]
    return sweep_dir


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


class LaunchCallbacks(Callback):
    """The launch's lifecycle, in the launching process (``hydra.callbacks.cts`` in ``conf/config.yaml``).

    Before any job: the start-up checks (values, output places, input files), the pre-flight
    (keys, request rules), one probe per distinct endpoint and request, the plan (forecast, budget)
    and the MLflow store, whose schema is created once here before parallel jobs race to migrate it.
    After the jobs: the sweep report, and the lines saying where the results are. Each hook turns a
    :class:`~cts.core.errors.CtsError` into its ``error:`` lines and exit status (Hydra would only warn).
    """

    def __init__(self) -> None:
        self._launch: Launch | None = None

    @property
    def launch(self) -> Launch | None:
        """The running launch (None before the start, after the end, and in a launcher's worker process)."""
        return self._launch

    def __getstate__(self) -> dict[str, Any]:
        """Without the launch: joblib and submitit pickle the callbacks for their workers, which read ``sweep.json``."""
        return {**self.__dict__, "_launch": None}

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Called by Hydra in the launching process, before any job starts.

        Every job's config is pre-flighted here too, so a missing key stops the sweep
        before it launches, and every distinct endpoint of the sweep is probed once.
        """
        with exit_on_error(), self._ended_on_error():
            self._before_sweep(config)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Single runs: the pre-flight (keys, endpoint probes) first, then the store (harmless when it exists)."""
        with exit_on_error(), self._ended_on_error():
            self._before_run(config)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """In the job's process, right after Hydra saved its ``.hydra/*.yaml``: mask the keys in them."""
        hide_written_secrets(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Build the paper-style sweep report and log it as a sweep-level run."""
        try:
            with exit_on_error():
                self._after_sweep(config)
        finally:
            self._end()

    def _begin(self, launch: Launch) -> Launch:
        """Start ``launch``: nothing of an earlier one (a notebook's) is reused, its endpoints are probed again."""
        self._launch = launch
        launch.bind()  # for the pre-flight here, and the jobs Hydra runs in this thread (basic launcher, a single run)
        return launch

    def _end(self) -> None:
        self._launch = None
        unbind()

    @contextlib.contextmanager
    def _ended_on_error(self) -> Iterator[None]:
        """A launch that fails (or stops: ``plan=only``) before its jobs ends here: Hydra calls no end hook then."""
        try:
            yield
        except BaseException:
            tracking.close_held_writers()  # started for traces the launch will not write
            self._end()
            raise

    def _before_sweep(self, config: DictConfig) -> None:
        from cts.compose.anchor_check import check_anchors
        from cts.compose.app import (
            check_start,
            preflight_problems_of,
            probe_completions,
            probe_endpoints,
            stop_on_problems,
            task_groups,
        )
        from cts.compose.errors import one_line_composition_errors
        from cts.compose.request_rules import warn_unapplied_params
        from cts.plan import before_launch
        from cts.sweep._compose import ComposedJobs

        warn_literal_secrets(list(config.hydra.overrides.task))
        remember_secrets(config)  # masked in the pre-flight's messages, the logs and the files from here on
        sweep_dir = pin_sweep_dir(config)  # before any job's config is composed
        swept = swept_keys(list(config.hydra.overrides.task))
        resume = resume_command(sys.argv[1:], Path(sweep_dir), sweep_dir)
        launch = self._begin(Launch.begin(sweep_dir, swept, resume, multirun=True))
        opens_here = jobs_open_store_here(config)
        if opens_here and (uri := traced_store(config)):  # imports during the checks
            tracking.start_trace_writer(uri, open_store=False)
        launch.composed = ComposedJobs()
        with one_line_composition_errors():  # a typo'd swept key or option: one line, and no sweep dir
            launch.jobs = jobs = tuple(sweep_job_configs(config, launch.composed))
        check_start(config, jobs, launch.preflight)  # values, output places, input files: before any dir or store
        tracking.check_store(str(config.tracking.uri))  # a dead server, a damaged file: before any LLM call
        stop_on_problems([p for job in jobs for p in preflight_problems_of(job, task_groups(job), launch.preflight)])
        launch.preflight.checked.update(tuple(job.hydra.overrides.task) for job in jobs)  # runs do not repeat it
        warn_unapplied_params(jobs)  # a response_format the model's request rules drop or reshape
        probe_endpoints(jobs, launch.preflight)  # every distinct endpoint of the sweep, once
        probe_completions(jobs, launch.preflight)  # one minimal completion per distinct request of the sweep
        check_anchors(jobs, launch.preflight)  # an LLM judge must score an empty answer 0 and the gold 100
        launch.plan = before_launch(config, launch, [task_groups(job) for job in jobs])  # plan=true: forecast, limit
        if launch.plan.stop:  # plan=only: the forecast and the command that runs the sweep; nothing else
            print("\n".join(launch.plan.stop), flush=True)
            raise LaunchDone()
        launch.record.write()  # <sweep>/sweep.json: what jobs in other processes (joblib, Slurm) read
        if not opens_here:
            tracking.prepare_store(config.tracking.uri)
            launch.store = str(config.tracking.uri)
        elif any(job.tracking.instance_traces for job in jobs):
            tracking.start_trace_writer(config.tracking.uri)
        tracking.close_held_writers()  # one started for a store no job writes traces to

    def _before_run(self, config: DictConfig) -> None:
        if uri := traced_store(config):  # MLflow's import (~2 s) on the other core during the checks
            tracking.start_trace_writer(uri, open_store=False)
        from cts.compose.anchor_check import check_anchors
        from cts.compose.app import (
            check_start,
            preflight,
            probe_completions,
            probe_endpoints,
            task_groups,
        )
        from cts.compose.request_rules import warn_unapplied_params
        from cts.plan.calibrate import plan_settings

        warn_literal_secrets(list(config.hydra.overrides.task))
        remember_secrets(config)
        run_dir = OmegaConf.select(config, "hydra.run.dir", default=None, throw_on_resolution_failure=False)
        launch = self._begin(Launch.begin(str(run_dir or ".")))
        launch.jobs = (config,)
        if plan_settings(config).then == "stop":  # it would run the job it was asked only to forecast
            raise ConfigError("error: plan: plan=only forecasts a multirun; add -m (python run.py -m ... plan=only)")
        check_start(config, [config], launch.preflight)  # values, output places, input files: before the run dir
        tracking.check_store(str(config.tracking.uri))  # a dead server, a damaged file: before any LLM call
        preflight(config, groups=task_groups(config))
        warn_unapplied_params([config])
        probe_endpoints([config], launch.preflight)  # before the store: a dead endpoint fails fast, creates nothing
        probe_completions([config], launch.preflight)
        check_anchors([config], launch.preflight)
        if config.tracking.instance_traces:  # after the checks: the writer opens (creates) the store
            tracking.start_trace_writer(config.tracking.uri)
        tracking.prepare_store(config.tracking.uri)
        launch.store = str(config.tracking.uri)

    def _after_sweep(self, config: DictConfig) -> None:
        from cts._util.startup import end_startup_gc
        from cts.plan import after_sweep
        from cts.sweep._shared import held_elsewhere, left_to_others, sweep_end

        end_startup_gc()  # a launcher whose jobs ran elsewhere (joblib, Slurm) left it off here
        launch = self._launch
        n_jobs = len(launch.jobs) if launch is not None else 0
        sweep_dir = Path(str(config.hydra.sweep.dir))
        with sweep_end(sweep_dir):  # two sweeps started into one dir: the one that finishes last ends it
            held = held_elsewhere(sweep_dir)
            try:
                report = (
                    None
                    if held or not config.get("sweep_report", default_of(Config, "sweep_report"))
                    else _report(config, n_jobs)
                )
            finally:  # <sweep>/sweep_actual.json (the report's time in it), beside the forecast when there is one
                after_sweep(launch.plan if launch is not None else None)
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
            _check_scored_sweep(config)

    def on_run_end(self, config: DictConfig, job_return: JobReturn | None = None, **kwargs: Any) -> None:
        """A single run that finished: say where its results are and how to look at them. The launch ends."""
        self._end()
        if job_return is None or job_return.status != JobStatus.COMPLETED or job_return.hydra_cfg is None:
            return
        job_dir = Path(str(job_return.hydra_cfg.hydra.runtime.output_dir))
        print("\n".join(job_closing_lines(str(job_dir), *_tracked_run(job_dir, config))), flush=True)
        with exit_on_error():  # the closing lines first: a job that measured too little still says where it is
            check_job(job_dir, _min_scored(config))


def _report(config: DictConfig, n_jobs: int) -> Path:
    """The sweep's report dir: built now, unless a process of the same sweep dir that ended first wrote it."""
    from cts.sweep._shared import written_report

    written = written_report(Path(str(config.hydra.sweep.dir)))
    if written is not None:
        print(f"cts: the sweep report was written by another process of this sweep dir: {written}", flush=True)
        return written.parent
    return report_or_exit(config, n_jobs)


def _min_scored(config: DictConfig) -> float | None:
    """``min_scored`` of ``config`` (0 when it predates the key: a run that measured nothing fails)."""
    value = OmegaConf.select(config, "min_scored", default=0)
    return None if value is None else float(value)


def _check_scored_sweep(config: DictConfig) -> None:
    """Exit 3 when a job of the sweep measured too little (:mod:`cts.compose.scored`), after the closing lines."""
    from cts.report.jobs import job_dirs

    sweep_dir = Path(str(config.hydra.sweep.dir))
    check_sweep(job_dirs(sweep_dir) if sweep_dir.is_dir() else [], _min_scored(config))


def _tracked_run(job_dir: Path, config: DictConfig) -> tuple[str | None, str, str]:
    """The run id, experiment and store a job's ``summary.json`` names (the config's when it has none)."""
    path = job_dir / "summary.json"
    summary = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    experiment = summary.get("experiment") or str(config.tracking.experiment)
    return summary.get("run_id"), experiment, summary.get("tracking_uri") or str(config.tracking.uri)


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
