"""The planner's two moments in a multirun: before the launch (forecast, spend limit) and after it (actuals).

:mod:`cts.compose.launch.steps` calls :func:`before_launch` once the pre-flight has passed and
:func:`after_sweep` when every job and the sweep report have ended. Every sweep writes what it
actually did to ``<sweep>/sweep_actual.json``; with ``plan=true`` the calibration slice's cost is
said before it runs (:mod:`cts.plan.prior`), the forecast is written to ``<sweep>/plan/``
(``forecast.md``, ``forecast.csv``), printed, logged as an MLflow run (``cts.kind=plan``) and, at
the end, compared with the actual run in the same MLflow run (:mod:`cts.plan.actual`).
``plan=only`` stops after the forecast with the command that runs the sweep (:attr:`SweepPlan.stop`).
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cts._util.launch import Launch
from cts.compose.schema import Adaptive, Config, default_of
from cts.core.errors import PlanRefused
from cts.plan.actual import PLAN_DIR, SweepPlan, log_plan, record_actual
from cts.plan.batched import live_steps, pipeline_of
from cts.plan.calibrate import (
    JobPlan,
    PlanSettings,
    calibrate,
    calibration_dir,
    calibration_slices,
    plan_settings,
    slices_from,
)
from cts.plan.forecast import JobForecast, JobSlice, forecast_job, forecast_sweep
from cts.plan.limit import dirs_spent, slice_spent, spend_over
from cts.plan.samples import Routes, count_records, routes_of
from cts.plan.table import forecast_csv, forecast_markdown, write_tables
from cts.protocol.spend import count_ledger_rows

__all__ = ["SweepPlan", "after_sweep", "before_launch"]

log = logging.getLogger(__name__)


def before_launch(config: DictConfig, launch: Launch, groups: Sequence[Sequence[str]]) -> SweepPlan:
    """Note each job dir's records; with ``plan`` on, forecast the sweep and refuse one over its spend limit.

    Args:
        config: The sweep's config.
        launch: The sweep's launch: its jobs' composed configs, and where the instance ids they share are kept.
        groups: Per job, the config groups its task calls models of (``cts.compose.app.task_groups``).

    Raises:
        PlanRefused: The calibration slice failed, or the sweep may cost more than
            ``services.llm.spend.max_usd`` or its forecast cannot show it does not (unless
            ``services.llm.spend.allow_over_forecast``; :func:`cts.plan.limit.spend_over`).
    """
    sweep_dir, jobs = Path(str(config.hydra.sweep.dir)), launch.jobs
    settings = plan_settings(config)
    if settings.enabled and not all(_plannable(job) for job in jobs):
        log.warning("plan: only the evaluate task's instances are forecast; this sweep runs without a plan")
        settings = PlanSettings(enabled=False, then=settings.then if settings.only else "run")
    ids = launch.instance_ids if settings.enabled else None
    plans = tuple(_job_plan(config, job, i, g, ids) for i, (job, g) in enumerate(zip(jobs, groups)))
    before = {p.name: count_records(p.job_dir) for p in plans}
    tracking_ = {"uri": str(config.tracking.uri), "experiment": str(config.tracking.experiment)}
    plan = SweepPlan(sweep_dir, plans, before, time.monotonic(), tracking=tracking_)
    if settings.enabled:
        plan.slice_usd, plan.forecast = _forecast(config, plan, settings, (jobs, groups))
        _check_spend_limit(config, plan, settings)
        if settings.only:
            plan.stop = _only_lines(plan, settings)
            return plan
    elif settings.then == "stop":
        plan.stop = ("cts plan: nothing to forecast (only the evaluate task's instances are); nothing was run",)
        return plan
    elif settings.calibration:  # time the slice from where the main run's timing starts: tracking ready
        from cts import tracking

        tracking.prepare_store(str(config.tracking.uri))
    plan.ledger_before = {p.name: count_ledger_rows(p.job_dir) for p in plans}
    plan.started, plan.cpu_started = time.monotonic(), time.process_time()  # the main run starts now
    if settings.enabled or settings.calibration:
        from cts.plan.clock import ThreadClock

        plan.clock = ThreadClock(launch).start()  # it reads the session's loop
    return plan


def _job_plan(
    config: DictConfig, job: DictConfig, i: int, groups: Sequence[str], ids: dict[str, tuple[str, ...]] | None
) -> JobPlan:
    """The job as the planner sees it (``ids``: the launch's instance ids, None unplanned); unplanned, only its dir."""
    from cts._util.naming import job_name, swept_keys

    name = job_name(list(job.hydra.overrides.task), swept_keys(list(config.hydra.overrides.task)), f"job{i}")
    if ids is None:
        return JobPlan(name, (), Routes({}, {}, {}), 1, Path(str(config.hydra.sweep.dir)) / name)
    return JobPlan(
        name,
        _instance_ids(job, ids),
        routes_of(job, groups),
        _job_concurrency(config, job),
        Path(str(config.hydra.sweep.dir)) / name,
        int(job.get("repeats") or 1),  # each repeat is a run with its own calls (cts.protocol.design)
        pipeline_of(job),
    )


def _plannable(job: DictConfig) -> bool:
    """Whether the job's task runs instances the planner can count (the evaluate task's dataset)."""
    from hydra.utils import get_object

    from cts.tasks.evaluate import evaluate_task

    return get_object(str(job.task._target_)) is evaluate_task


def _instance_ids(job: DictConfig, ids: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The ids of the instances the job will run (its dataset, up to ``limit``); the jobs of a sweep share one read (``ids``)."""
    from cts.compose.app import ConfiguredTask, build_services
    from cts.data.jsonl import select_instances

    key = json.dumps([OmegaConf.to_container(job.dataset, resolve=True), job.get("limit")], sort_keys=True, default=str)
    if key not in ids:
        ids[key] = tuple(
            i.id for i in select_instances(ConfiguredTask(job, build_services(job)).input(), job.get("limit"))
        )
    return ids[key]


def _job_concurrency(config: DictConfig, job: DictConfig) -> int:
    """Instances in flight per job: the cts launcher's ``job_concurrency`` unless the command set ``concurrency``."""
    from cts._util.naming import factors

    chosen = OmegaConf.select(config, "hydra.launcher.job_concurrency", default=None)
    if chosen is None or "concurrency" in factors(list(config.hydra.overrides.task)):
        return int(job.get("concurrency") or 1)
    return int(chosen)


def _forecast(
    config: DictConfig, plan: SweepPlan, settings: PlanSettings, composed: tuple[Sequence[DictConfig], Any]
) -> tuple[float, JobForecast]:
    """The slice (told its cost first, then run), the forecast printed, written and logged; returns the slice's spend too."""
    from cts import tracking

    source = Path(settings.source) if settings.source else calibration_dir(plan.sweep_dir)
    tracking.prepare_store(str(config.tracking.uri))  # once, here: a new store's set-up is not the slice's overhead
    n = min([settings.calibration_n, *(len(j.ids) for j in plan.jobs)])
    if not settings.source:
        _tell_slice_cost(config, plan, composed, n)
        calibrate(sys.argv[1:], n, source, str(config.tracking.experiment))
    slices = slices_from(source, plan.jobs, None if settings.source else n)
    per_job = [forecast_job(s, settings.confidence) for s in slices]
    sweep = forecast_sweep(slices, settings.confidence)
    sweep = replace(sweep, **_wall(config, source, slices, per_job, sweep))
    table = forecast_markdown(per_job, sweep, settings.confidence)
    out = plan.sweep_dir / PLAN_DIR
    paths = write_tables(out, {"forecast.md": table, "forecast.csv": forecast_csv(per_job, sweep)})
    spent = slice_spent(plan.sweep_dir, plan.jobs, settings.source)
    print(f"cts plan: from {source} (it spent ${spent:.4f}, not in the forecast below)\n{table}", flush=True)
    for job in per_job:
        if job.unknown:
            log.warning("plan: %s is unknown: %s", job.name, job.unknown)
    log_plan(plan, sweep, paths, {"source": str(source), "calibration_n": str(settings.calibration_n)})
    return spent, sweep


def _tell_slice_cost(config: DictConfig, plan: SweepPlan, composed: tuple[Sequence[DictConfig], Any], n: int) -> None:
    """Print what the slice will cost at most and at least, before anything of it is sent."""
    from cts.plan.prior import slice_cost, slice_cost_line

    jobs, groups = composed
    runs = [min(n, len(j.ids)) * max(1, j.repeats) for j in plan.jobs]
    cap = OmegaConf.select(config, "services.llm.spend.max_usd", default=None)
    line = slice_cost_line(slice_cost(jobs, groups, runs), n, len(jobs), None if cap is None else float(cap))
    print(line, file=sys.stderr, flush=True)


def _wall(
    config: DictConfig, source: Path, slices: Sequence[JobSlice], per_job: Sequence[JobForecast], sweep: JobForecast
) -> dict[str, Any]:
    """The sweep's wall time (``wall_s``) or why it is not forecast (``wall_note``)."""
    from cts.plan.report_time import time_report
    from cts.plan.walltime import capacity_unknown, forecast_wall, loaded_wall, measure

    if not _one_schedule(config):
        return {"wall_note": "not forecast: the schedule is modelled for hydra/launcher=cts (the default) only"}
    if sweep.unknown or sweep.incomplete:
        return {"wall_note": "not forecast: some jobs are unknown"}
    ceiling = sum({e: c for j in slices for e, c in j.concurrency.items()}.values()) or 1
    adaptive = OmegaConf.select(config, "services.llm.adaptive", default=None) or {}
    initial = int(adaptive.get("initial") or 0) if adaptive.get("enabled", Adaptive().enabled) else 0
    measured = measure(source, calibration_slices(slices), slices[0].job_concurrency, ceiling, initial)
    if measured.note:
        return {"wall_note": f"not forecast: {measured.note}"}
    report = 0.0
    if config.get("sweep_report", default_of(Config, "sweep_report")):
        sizes = {j.name: j.n_total for j in slices}
        bootstrap = {str(k): float(v) for k, v in config.bootstrap.items()}
        timed = time_report(source, sizes, bootstrap, int(config.seed))
        report = timed or 0.0
    calls = [f.calls.expected for f in per_job]
    wall = forecast_wall(measured, slices, calls, sweep.calls, report)
    batch = sweep.batch
    if batch is not None:  # the live part: the batched stages' round trips and requests taken out
        live = [f.batch.calls_live.expected if f.batch else f.calls.expected for f in per_job]
        batch = replace(
            batch, wall_live=forecast_wall(live_steps(measured, slices), slices, live, batch.calls_live, report)
        )
    what = f"the schedule replayed the slice in {measured.slice_model_s:.1f} s, it took {measured.slice_wall_s:.1f} s"
    what += f"; the core share seen in the slice: {measured.core[0]:.0%}-{measured.core[2]:.0%}"
    took = measured.machine.capacity
    if took < measured.ceiling:
        what += f"; the endpoint took {took} requests at once in the slice (up to {measured.ceiling} configured)"
    elif capacity_unknown(measured):
        what += (
            f"; the slice had at most {measured.capacity_low} requests in flight and met no limit: the high end"
            f" assumes no more, the low end {measured.ceiling} (configured), the expected value the midpoint"
        )
    loaded = loaded_wall(measured, slices, calls, report)
    if loaded is not None:
        what += (
            f"; the machine's load average ({measured.load:.1f} on {measured.cores} cores) could leave it "
            f"{measured.loaded_core:.0%}: {loaded:.0f} s"
        )
    return {"wall_s": wall, "wall_note": what + ("" if report else "; without the report's time"), "batch": batch}


def _check_spend_limit(config: DictConfig, plan: SweepPlan, settings: PlanSettings) -> None:
    """Exit 1 before the main run when it may cost more than the spend limit (:func:`cts.plan.limit.spend_over`)."""
    limit = OmegaConf.select(config, "services.llm.spend", default=None) or {}
    if plan.forecast is None:
        return
    over = spend_over(limit, plan.forecast, dirs_spent(plan.sweep_dir, plan.jobs), plan.slice_usd)
    if over is None:
        return
    if limit.get("allow_over_forecast"):
        log.warning(
            "plan: %s; running anyway (services.llm.spend.allow_over_forecast=true), the running guard stays", over
        )
        return
    if settings.only:  # the forecast is what was asked for: say it, exit 0
        log.warning("plan: %s; the command below stops there too", over)
        return
    raise PlanRefused(
        f"error: plan: {over}; nothing of the main run was sent. Raise the spend limit, shrink the sweep, or pass "
        "services.llm.spend.allow_over_forecast=true."
    )


def _only_lines(plan: SweepPlan, settings: PlanSettings) -> tuple[str, ...]:
    """``plan=only``'s closing lines: nothing of the main run was sent; the command that runs it from the slice."""
    from cts._util.interrupt import entry_script, hydra_quote

    source = Path(settings.source) if settings.source else calibration_dir(plan.sweep_dir)
    kept = [a for a in sys.argv[1:] if not a.lstrip("+~").split("=", 1)[0].startswith(("plan", "hydra.sweep.dir"))]
    command = shlex.join(
        [
            sys.executable,
            entry_script(),
            *kept,
            "plan=true",
            f"plan.source={hydra_quote(str(source.resolve()))}",
            f"hydra.sweep.dir={hydra_quote(str(plan.sweep_dir.resolve()))}",
        ]
    )
    return (
        f"cts plan: forecast only (plan=only): nothing of the main run was sent; the forecast is in {plan.sweep_dir / PLAN_DIR}",
        "run the sweep (the slice's runs come from the response cache, 0 requests; the forecast is read from the slice):",
        f"  {command}",
    )


def _one_schedule(config: DictConfig) -> bool:
    """Whether the sweep's launcher runs every job at once in this process (``hydra/launcher=cts``)."""
    from hydra.utils import get_class

    target = OmegaConf.select(config, "hydra.launcher._target_", default=None)
    try:
        return bool(target) and bool(getattr(get_class(str(target)), "opens_store_in_jobs", False))
    except (ImportError, ValueError):
        return False


def after_sweep(plan: SweepPlan | None) -> dict[str, Any] | None:
    """Write ``<sweep>/sweep_actual.json``; with a forecast, compare them (printed, written, logged).

    Never raises: the sweep's own results are in its job dirs whatever happens here.
    """
    if plan is None or not plan.sweep_dir.is_dir():
        return None
    try:
        return record_actual(plan)
    except Exception:  # noqa: BLE001 - e.g. a job dir removed under the sweep: the sweep still ends as it ran
        log.exception("plan: recording the sweep's actual figures failed")
        return None
