"""The planner's two moments in a multirun: before the launch (forecast, spend limit) and after it (actuals).

:mod:`cts.compose.callbacks` calls :func:`before_launch` once the pre-flight has passed and
:func:`after_sweep` when every job has ended. Every sweep writes what it actually did to
``<sweep>/sweep_actual.json``; with ``plan=true`` the forecast is written to ``<sweep>/plan/``
(``forecast.md``, ``forecast.csv``), printed, logged as an MLflow run (``cts.kind=plan``) and,
at the end, compared with the actual run in the same MLflow run.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cts.plan.calibrate import (
    ACTUAL_FILE,
    JobPlan,
    PlanSettings,
    calibrate,
    calibration_dir,
    plan_settings,
    slices_from,
)
from cts.plan.forecast import COUNTS, JobForecast, forecast_job, forecast_sweep
from cts.plan.samples import Routes, count_records, instance_costs, routes_of
from cts.plan.table import comparison_markdown, forecast_csv, forecast_markdown, write_tables
from cts.protocol.spend import count_ledger_rows, unrecorded_usage

__all__ = ["SweepPlan", "after_sweep", "before_launch"]

log = logging.getLogger(__name__)
PLAN_DIR = "plan"


@dataclass
class SweepPlan:
    """What :func:`before_launch` knew, for :func:`after_sweep`."""

    sweep_dir: Path
    jobs: tuple[JobPlan, ...]
    records_before: Mapping[str, int]
    started: float
    forecast: JobForecast | None = None
    cpu_started: float = 0.0
    tracking: Mapping[str, str] = field(default_factory=dict)
    slice_usd: float = 0.0
    """What the calibration slice's job dirs booked (0 with ``plan.source``: nothing was sent for it)."""
    ledger_before: Mapping[str, int] = field(default_factory=dict)
    """Per job, the rows of its spend ledger before the main run (what it paid without records)."""


def before_launch(config: DictConfig, jobs: Sequence[DictConfig], groups: Sequence[Sequence[str]]) -> SweepPlan:
    """Note each job dir's records; with ``plan`` on, forecast the sweep and refuse one over its spend limit.

    Args:
        config: The sweep's config.
        jobs: Every job's composed config.
        groups: Per job, the config groups its task calls models of (``cts.compose.app.task_groups``).

    Raises:
        SystemExit: The calibration slice failed, or its spend plus the forecast's high end plus
            what the job dirs spent exceeds ``services.llm.spend.max_usd`` (unless
            ``services.llm.spend.allow_over_forecast``; see :func:`_check_spend_limit`).
    """
    sweep_dir = Path(str(config.hydra.sweep.dir))
    settings = plan_settings(config)
    if settings.enabled and not all(_plannable(job) for job in jobs):
        log.warning("plan: only the evaluate task's instances are forecast; this sweep runs without a plan")
        settings = PlanSettings()
    plans = tuple(_job_plan(config, job, i, g, settings.enabled) for i, (job, g) in enumerate(zip(jobs, groups)))
    before = {p.name: count_records(p.job_dir) for p in plans}
    plan = SweepPlan(
        sweep_dir,
        plans,
        before,
        time.monotonic(),
        tracking={"uri": str(config.tracking.uri), "experiment": str(config.tracking.experiment)},
    )
    if settings.enabled:
        plan.forecast = _forecast(config, plan, settings)
        plan.slice_usd = _slice_spent(plan, settings)
        _check_spend_limit(config, plan)
    elif settings.calibration:  # time the slice from where the main run's timing starts: tracking ready
        from cts import tracking

        tracking.prepare_store(str(config.tracking.uri))
    plan.ledger_before = {p.name: count_ledger_rows(p.job_dir) for p in plans}
    plan.started, plan.cpu_started = time.monotonic(), time.process_time()  # the main run starts now
    return plan


def _job_plan(config: DictConfig, job: DictConfig, i: int, groups: Sequence[str], planned: bool) -> JobPlan:
    """The job as the planner sees it; unplanned, only its dir (what its records count after the sweep)."""
    from cts._util.naming import job_name, swept_keys

    name = job_name(list(job.hydra.overrides.task), swept_keys(list(config.hydra.overrides.task)), f"job{i}")
    if not planned:
        return JobPlan(name, (), Routes({}, {}, {}), 1, Path(str(config.hydra.sweep.dir)) / name)
    return JobPlan(
        name,
        _instance_ids(job),
        routes_of(job, groups),
        _job_concurrency(config, job),
        Path(str(config.hydra.sweep.dir)) / name,
        int(job.get("repeats") or 1),  # each repeat is a run with its own calls (cts.protocol.design)
    )


def _plannable(job: DictConfig) -> bool:
    """Whether the job's task runs instances the planner can count (the evaluate task's dataset)."""
    from hydra.utils import get_object

    from cts.tasks.evaluate import evaluate_task

    return get_object(str(job.task._target_)) is evaluate_task


def _instance_ids(job: DictConfig) -> tuple[str, ...]:
    """The ids of the instances the job will run (its dataset, up to ``limit``); the jobs of a sweep share one read."""
    from cts.compose.app import ConfiguredTask, build_services
    from cts.data.jsonl import select_instances

    key = json.dumps([OmegaConf.to_container(job.dataset, resolve=True), job.get("limit")], sort_keys=True, default=str)
    if key not in _IDS:
        _IDS[key] = tuple(
            i.id for i in select_instances(ConfiguredTask(job, build_services(job)).input(), job.get("limit"))
        )
    return _IDS[key]


_IDS: dict[str, tuple[str, ...]] = {}


def _job_concurrency(config: DictConfig, job: DictConfig) -> int:
    """Instances in flight per job: the cts launcher's ``job_concurrency`` unless the command set ``concurrency``."""
    from cts._util.naming import factors

    chosen = OmegaConf.select(config, "hydra.launcher.job_concurrency", default=None)
    if chosen is None or "concurrency" in factors(list(config.hydra.overrides.task)):
        return int(job.get("concurrency") or 1)
    return int(chosen)


def _forecast(config: DictConfig, plan: SweepPlan, settings: PlanSettings) -> JobForecast:
    from cts import tracking

    source = Path(settings.source) if settings.source else calibration_dir(plan.sweep_dir)
    tracking.prepare_store(str(config.tracking.uri))  # once, here: a new store's set-up is not the slice's overhead
    if not settings.source:
        n = min([settings.calibration_n, *(len(j.ids) for j in plan.jobs)])
        calibrate(sys.argv[1:], n, source, str(config.tracking.experiment))
    slices, timing = slices_from(source, plan.jobs)
    per_job = [forecast_job(s, timing, settings.confidence) for s in slices]
    sweep = forecast_sweep(slices, timing, settings.confidence, together=_one_schedule(config))
    table = forecast_markdown(per_job, sweep, settings.confidence)
    out = plan.sweep_dir / PLAN_DIR
    paths = write_tables(out, {"forecast.md": table, "forecast.csv": forecast_csv(per_job, sweep)})
    paid = sum(c.counts.get("usd", 0.0) for j in slices for c in j.samples)
    print(f"cts plan: from {source} (its instances cost ${paid:.4f}, not in the forecast below)\n{table}", flush=True)
    for job in slices:
        if not job.samples and job.remaining:
            log.warning("plan: no record of %s in %s: its forecast counts nothing", job.name, source)
    _log(plan, sweep, paths, {"source": str(source), "calibration_n": str(settings.calibration_n)})
    return sweep


def _one_schedule(config: DictConfig) -> bool:
    """Whether the sweep's launcher runs every job at once in this process (``hydra/launcher=cts``)."""
    from hydra.utils import get_class

    target = OmegaConf.select(config, "hydra.launcher._target_", default=None)
    try:
        return bool(target) and bool(getattr(get_class(str(target)), "opens_store_in_jobs", False))
    except (ImportError, ValueError):
        return False


def _dirs_spent(root: Path, jobs: Sequence[JobPlan]) -> float:
    """USD booked under ``root`` by the jobs' dirs (records and ledger, every run into them)."""
    from cts.protocol.spend import spent_so_far

    return sum(spent_so_far(root / j.name) for j in jobs)


def _slice_spent(plan: SweepPlan, settings: PlanSettings) -> float:
    """What the calibration slice's dirs booked; 0 with ``plan.source`` (nothing was sent for it)."""
    return 0.0 if settings.source else _dirs_spent(calibration_dir(plan.sweep_dir), plan.jobs)


def _check_spend_limit(config: DictConfig, plan: SweepPlan) -> None:
    """Exit 1 before the main run when what the sweep may cost in all exceeds ``services.llm.spend.max_usd``.

    The total is what the job dirs spent before (every earlier run into them) + what the
    calibration slice's dirs booked (:attr:`SweepPlan.slice_usd`) + the forecast's high end.
    Nothing in it is counted twice: a reply is billed once, to the call that sent it, and a
    cache hit books $0. The slice's fresh calls are booked in its own dirs only (beside the
    sweep dir, never in a job dir); the main run replays them from the cache at $0, and the
    forecast counts the slice's runs as free (``JobSlice.n_free``). A slice whose replies
    were already cached (an earlier run of the same jobs) booked $0 itself, and a resumed
    slice's earlier spend is counted, as a job dir's is. ``plan.source`` sends nothing: its
    spend is not this sweep's (a source that is the sweep dir itself is in the first term).
    The main run's running guard caps the job dirs' spend only; this check alone sees the slice's.
    """
    limit = OmegaConf.select(config, "services.llm.spend", default=None) or {}
    cap = limit.get("max_usd")
    forecast = plan.forecast
    if cap is None or forecast is None:
        return
    spent = _dirs_spent(plan.sweep_dir, plan.jobs)
    high = spent + plan.slice_usd + forecast.usd.high
    part = f" (priced models only; no price: {', '.join(forecast.unpriced)})" if forecast.unpriced else ""
    if high <= float(cap):
        if part:
            log.warning("plan: the forecast is within the spend limit for its priced models only%s", part)
        return
    terms = [
        f"forecast high end ${forecast.usd.high:.4f}{part}",
        *([f"${plan.slice_usd:.4f} spent by the calibration slice"] if plan.slice_usd else []),
        *([f"${spent:.4f} spent in the job dirs before"] if spent else []),
    ]
    total = " + ".join(terms) + (f" = ${high:.4f}" if len(terms) > 1 else "")
    over = f"{total} exceeds services.llm.spend.max_usd ${float(cap):.4f} by ${high - float(cap):.4f}"
    if limit.get("allow_over_forecast"):
        log.warning(
            "plan: %s; running anyway (services.llm.spend.allow_over_forecast=true), the running guard stays", over
        )
        return
    sys.exit(
        f"error: plan: {over}; nothing of the main run was sent. Raise the spend limit, shrink the sweep, or pass "
        "services.llm.spend.allow_over_forecast=true."
    )


def actual_figures(plan: SweepPlan) -> dict[str, float]:
    """What the main run did: its calls, tokens and USD, and its wall time.

    The counts are its new records' plus what its jobs' spend ledgers booked for
    instances without a record (stopped mid-way by the spend limit): every request paid for.
    """
    totals = {c: 0.0 for c in COUNTS}
    for job in plan.jobs:
        for cost in instance_costs(job.job_dir, job.routes, skip=plan.records_before.get(job.name, 0)):
            for c in COUNTS:
                totals[c] += cost.counts.get(c, 0.0)
        unrecorded = unrecorded_usage(job.job_dir, skip=plan.ledger_before.get(job.name, 0))
        totals["calls"] += unrecorded.pop("requests")
        for c, value in unrecorded.items():
            totals[c] += value
    return {**totals, "wall_s": time.monotonic() - plan.started, "cpu_s": time.process_time() - plan.cpu_started}


def after_sweep(plan: SweepPlan | None) -> dict[str, float] | None:
    """Write ``<sweep>/sweep_actual.json``; with a forecast, compare them (printed, written, logged).

    Never raises: the sweep's own results are in its job dirs whatever happens here.
    """
    if plan is None or not plan.sweep_dir.is_dir():
        return None
    try:
        return _record_actual(plan)
    except Exception:  # noqa: BLE001 - e.g. a job dir removed under the sweep: the sweep still ends as it ran
        log.exception("plan: recording the sweep's actual figures failed")
        return None


def _record_actual(plan: SweepPlan) -> dict[str, float]:
    actual = actual_figures(plan)
    # A file, not a dir, at the sweep's root: a sweep dir's sub-dirs are its jobs (and its report).
    (plan.sweep_dir / ACTUAL_FILE).write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if plan.forecast is None:
        return actual
    table = comparison_markdown(plan.forecast, actual)
    print(table, flush=True)
    paths = write_tables(plan.sweep_dir / PLAN_DIR, {"forecast_vs_actual.md": table})
    _log(plan, plan.forecast, [*paths, plan.sweep_dir / ACTUAL_FILE], {}, {f"actual_{k}": v for k, v in actual.items()})
    return actual


def _log(
    plan: SweepPlan,
    sweep: JobForecast,
    paths: Sequence[Path],
    params: Mapping[str, str],
    extra: Mapping[str, float] | None = None,
) -> None:
    """Log the forecast (and later the actuals) as the sweep's plan run; a tracking failure only warns."""
    from cts import tracking

    metrics: dict[str, Any] = dict(extra or {})
    for name in ("calls", "tokens_in", "tokens_out", "tokens_reasoning", "usd", "wall_s"):
        iv = getattr(sweep, name)
        if name != "usd" or not sweep.unpriced:
            metrics.update({f"forecast_{name}_{end}": getattr(iv, end) for end in ("low", "expected", "high")})
    tags = {"cts.kind": "plan", "cts.sweep_dir": str(plan.sweep_dir)}
    try:
        with tracking.open_mlflow_run(
            plan.tracking["uri"],
            plan.tracking["experiment"],
            f"plan:{plan.sweep_dir.name}",
            params=params,
            tags=tags,
            job_dir=plan.sweep_dir / PLAN_DIR,
        ):
            tracking.log_metrics(metrics)
            tracking.log_artifacts(list(paths), "plan")
    except Exception:  # noqa: BLE001 - the forecast is on disk; the sweep must not fail on its tracking
        log.exception("plan: logging the forecast to MLflow failed")
