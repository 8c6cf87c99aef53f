"""The steps of a launch, in order (:data:`STEPS`): check, probe, plan, store, run, report.

``python run.py`` and ``python run.py -m`` walk the same steps. :func:`begin` opens the launch
(its dir, its jobs); Hydra's start hook walks the steps before ``run`` (:func:`before_jobs`),
Hydra's launcher runs the jobs, and its end hook walks the steps after ``run`` (:func:`after_jobs`).
What differs is data: a single run's launch holds one job (Hydra's config), a sweep's every job
its overrides expand to; a sweep alone has a pinned sweep dir, a plan and a sweep report.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf

from cts import tracking
from cts._util.interrupt import resume_command
from cts._util.launch import Launch
from cts._util.naming import swept_keys
from cts.compose.launch.jobs import jobs_open_store_here, pin_sweep_dir, sweep_job_configs, traced_store
from cts.compose.launch.report import end_run, end_sweep
from cts.compose.secret_files import remember_secrets, warn_literal_secrets
from cts.core.errors import ConfigError, LaunchDone


@dataclass(frozen=True)
class Launching:
    """One launch as its steps see it.

    Attributes:
        config: Hydra's config of the run or of the sweep (what its hooks receive).
        launch: The launch: its jobs (one for a single run), the pre-flight's memo, the plan, the store.
        job_return: What a single run's job returned (its end hook's; None otherwise).
    """

    config: DictConfig
    launch: Launch
    job_return: JobReturn | None = None


@dataclass(frozen=True)
class Step:
    """One named step of a launch.

    Attributes:
        name: The step's name (``check``, ``probe`` ...).
        act: What it does to the launch; None for ``run``, which Hydra's launcher does
            (each job through :func:`cts.compose.app.run`) between the start and end hooks.
    """

    name: str
    act: Callable[[Launching], None] | None


def begin(config: DictConfig, *, multirun: bool) -> Launching:
    """Open a launch: the secrets masked, its dir (a sweep's pinned), its jobs, the trace writer's head start.

    Args:
        config: Hydra's config of the run or of the sweep.
        multirun: Whether Hydra launches a sweep (``-m``).
    """
    warn_literal_secrets(list(config.hydra.overrides.task))
    remember_secrets(config)  # masked in the pre-flight's messages, the logs and the files from here on
    launch = sweep_launch(config) if multirun else Launch.begin(_run_dir(config))
    launch.jobs = _jobs(config, launch)
    if _traces_here(config, multirun) and (uri := traced_store(config)):  # held: no store before the checks
        tracking.start_trace_writer(uri, open_store=False, in_process_docs=_docs_here(launch.jobs, multirun))
    return Launching(config, launch)


def check(at: Launching) -> None:
    """Refuse bad values, output places, input files, store, keys and request rules, before any dir or LLM call."""
    from cts.compose.app import check_start, preflight_problems_of, stop_on_problems, task_groups
    from cts.compose.request_rules import warn_unapplied_params

    launch, jobs = at.launch, at.launch.jobs
    _refuse_plan_only_run(at)
    check_start(at.config, jobs, launch.preflight)  # values, output places, input files: before any dir or store
    tracking.check_store(str(at.config.tracking.uri))  # a dead server, a damaged file: before any LLM call
    stop_on_problems([p for job in jobs for p in preflight_problems_of(job, task_groups(job), launch.preflight)])
    launch.preflight.checked.update(tuple(job.hydra.overrides.task) for job in jobs)  # runs do not repeat it
    warn_unapplied_params(jobs)  # a response_format the model's request rules drop or reshape


def probe(at: Launching) -> None:
    """Probe every distinct endpoint and request of the launch's jobs once, and an LLM judge's anchors."""
    from cts.compose.anchor_check import check_anchors
    from cts.compose.app import probe_completions, probe_endpoints

    jobs, memo = at.launch.jobs, at.launch.preflight
    probe_endpoints(jobs, memo)  # before the store: a dead endpoint fails fast, creates nothing
    probe_completions(jobs, memo)  # one minimal completion per distinct request
    check_anchors(jobs, memo)  # an LLM judge must score an empty answer 0 and the gold 100


def plan(at: Launching) -> None:
    """A sweep's plan (``plan=true``: forecast, spend limit); ``plan=only`` stops here. A single run has none."""
    from cts.compose.app import task_groups
    from cts.plan import before_launch

    launch = at.launch
    if not launch.multirun:
        return
    launch.plan = before_launch(at.config, launch, [task_groups(job) for job in launch.jobs])
    if launch.plan.stop:  # plan=only: the forecast and the command that runs the sweep; nothing else
        print("\n".join(launch.plan.stop), flush=True)
        raise LaunchDone()


def store(at: Launching) -> None:
    """Open the MLflow store once, before parallel jobs race to migrate it, unless the jobs open it here in turn.

    A sweep first writes ``<sweep>/sweep.json``, which jobs in other processes (joblib, Slurm) read.
    """
    launch, config = at.launch, at.config
    if launch.multirun:
        launch.record.write()
    if _traces_here(config, launch.multirun) and any(job.tracking.instance_traces for job in launch.jobs):
        tracking.start_trace_writer(config.tracking.uri)  # after the checks: the writer may open (create) the store
    if not (launch.multirun and jobs_open_store_here(config)):
        tracking.prepare_store(config.tracking.uri)
        launch.store = str(config.tracking.uri)
    tracking.close_held_writers()  # one started for a store no job writes traces to


def report(at: Launching) -> None:
    """Say where the results are (a sweep: its report, built now) and exit 3 when a job measured too little."""
    launch = at.launch
    if launch.multirun:
        end_sweep(at.config, len(launch.jobs), launch.plan)
    else:
        end_run(at.config, at.job_return)


RUN = "run"
STEPS: tuple[Step, ...] = (
    Step("check", check),
    Step("probe", probe),
    Step("plan", plan),
    Step("store", store),
    Step(RUN, None),
    Step("report", report),
)


def before_jobs() -> tuple[Step, ...]:
    """The steps Hydra's start hook walks: those before ``run``."""
    names = [step.name for step in STEPS]
    return STEPS[: names.index(RUN)]


def after_jobs() -> tuple[Step, ...]:
    """The steps Hydra's end hook walks: those after ``run``."""
    names = [step.name for step in STEPS]
    return STEPS[names.index(RUN) + 1 :]


def walk(steps: tuple[Step, ...], at: Launching) -> None:
    """Do ``steps`` in order (``run`` is Hydra's: skipped)."""
    for step in steps:
        if step.act is not None:
            step.act(at)


def _traces_here(config: DictConfig, multirun: bool) -> bool:
    """Whether this process writes the jobs' traces: a single run's, or those of a launcher that runs them here."""
    return not multirun or jobs_open_store_here(config)


def _docs_here(jobs: tuple[DictConfig, ...], multirun: bool) -> int:
    """How many trace documents the launch's process writes before it starts the writer process.

    A sweep that traces more than :data:`cts.tracking.IN_PROCESS_DOCS` instances in all (or an
    unknown number: a job without ``limit``) starts it at once, so it imports MLflow on the other
    core while the checks run. A smaller sweep, like a single run, writes its traces itself and
    never pays the process's start (about 2 s of CPU).
    """
    if not multirun:
        return tracking.IN_PROCESS_DOCS
    limits = [OmegaConf.select(job, "limit", default=None) for job in jobs]
    if any(limit is None for limit in limits):
        return 0
    traced = sum(int(limit) * int(OmegaConf.select(job, "repeats", default=1)) for limit, job in zip(limits, jobs))
    return tracking.IN_PROCESS_DOCS if traced <= tracking.IN_PROCESS_DOCS else 0


def _run_dir(config: DictConfig) -> str:
    run_dir = OmegaConf.select(config, "hydra.run.dir", default=None, throw_on_resolution_failure=False)
    return str(run_dir or ".")


def sweep_launch(config: DictConfig) -> Launch:
    """A sweep's launch: its dir pinned before any job's config is composed, its swept keys, its resume command.

    The cts launcher begins one so when Hydra's callbacks did not (``hydra.callbacks`` emptied).
    """
    sweep_dir = pin_sweep_dir(config)
    swept = swept_keys(list(config.hydra.overrides.task))
    return Launch.begin(sweep_dir, swept, resume_command(sys.argv[1:], Path(sweep_dir), sweep_dir), multirun=True)


def _jobs(config: DictConfig, launch: Launch) -> tuple[DictConfig, ...]:
    """Every job's composed config: a single run's is Hydra's; a sweep's are composed once, by the launch's memo."""
    from cts.compose.errors import one_line_composition_errors
    from cts.sweep._compose import ComposedJobs

    if not launch.multirun:
        return (config,)
    launch.composed = ComposedJobs()
    with one_line_composition_errors():  # a typo'd swept key or option: one line, and no sweep dir
        return tuple(sweep_job_configs(config, launch.composed))


def _refuse_plan_only_run(at: Launching) -> None:
    """``plan=only`` forecasts a sweep: a single run would run the job it was asked only to forecast."""
    from cts.plan.calibrate import plan_settings

    if not at.launch.multirun and plan_settings(at.config).then == "stop":
        raise ConfigError("error: plan: plan=only forecasts a multirun; add -m (python run.py -m ... plan=only)")
