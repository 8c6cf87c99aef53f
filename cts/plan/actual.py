"""What a sweep actually did, beside its forecast: ``<sweep>/sweep_actual.json`` and the plan's MLflow run."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cts.plan.calibrate import ACTUAL_FILE, JobPlan
from cts.plan.forecast import COUNTS, JobForecast
from cts.plan.samples import instance_costs
from cts.plan.table import QUANTITIES, comparison_markdown, write_tables
from cts.protocol.spend import unrecorded_usage

__all__ = ["PLAN_DIR", "SweepPlan", "actual_figures", "log_plan", "record_actual"]

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
    """What the calibration slice's job dirs booked (0 with ``plan.source`` elsewhere: nothing was sent for it)."""
    ledger_before: Mapping[str, int] = field(default_factory=dict)
    """Per job, the rows of its spend ledger before the main run (what it paid without records)."""
    clock: Any = None
    """The :class:`cts.plan.clock.ThreadClock` timing the main run (planned sweeps and slices)."""
    stop: tuple[str, ...] = ()
    """``plan=only``: the closing lines; the launch ends there, exit 0, nothing of the main run sent."""


def actual_figures(plan: SweepPlan) -> dict[str, Any]:
    """What the main run did: its calls, tokens and USD, its wall and CPU time, and its timeline.

    The counts are its new records' plus what its jobs' spend ledgers booked for
    instances without a record (stopped mid-way by the spend limit): every request paid for.
    The wall time runs from the end of the forecast to the end of the sweep report.
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
    out: dict[str, Any] = {
        **totals,
        "wall_s": time.monotonic() - plan.started,
        "cpu_s": time.process_time() - plan.cpu_started,
    }
    if plan.clock is not None:
        out["timeline"] = plan.clock.stop().to_json()
    return out


def record_actual(plan: SweepPlan) -> dict[str, Any]:
    """Write ``<sweep>/sweep_actual.json``; with a forecast, print and log it beside the forecast."""
    actual = actual_figures(plan)
    # A file, not a dir, at the sweep's root: a sweep dir's sub-dirs are its jobs (and its report).
    (plan.sweep_dir / ACTUAL_FILE).write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if plan.forecast is None:
        return actual
    table = comparison_markdown(plan.forecast, actual)
    print(table, flush=True)
    paths = write_tables(plan.sweep_dir / PLAN_DIR, {"forecast_vs_actual.md": table})
    numbers = {f"actual_{k}": float(v) for k, v in actual.items() if isinstance(v, int | float)}
    log_plan(plan, plan.forecast, [*paths, plan.sweep_dir / ACTUAL_FILE], {}, numbers)
    return actual


def log_plan(
    plan: SweepPlan,
    sweep: JobForecast,
    paths: Sequence[Path],
    params: Mapping[str, str],
    extra: Mapping[str, float] | None = None,
) -> None:
    """Log the forecast (and later the actuals) as the sweep's plan run; a tracking failure only warns.

    A quantity the forecast does not know (an unknown or incomplete sweep, an unpriced USD, a wall
    time not forecast) has no ``forecast_*`` metric: MLflow holds numbers only.
    """
    from cts import tracking

    metrics: dict[str, Any] = dict(extra or {})
    for name in QUANTITIES:
        iv = getattr(sweep, name)
        unknown = iv is None or sweep.unknown or sweep.incomplete or (name == "usd" and sweep.unpriced)
        if not unknown:
            metrics.update({f"forecast_{name}_{end}": getattr(iv, end) for end in ("low", "expected", "high")})
    batch = sweep.batch
    if batch is not None and not (sweep.unknown or sweep.incomplete or batch.unpriced):
        metrics.update({f"forecast_usd_batch_{end}": getattr(batch.usd, end) for end in ("low", "expected", "high")})
    wall = batch.wall_live if batch is not None else None
    if batch is not None and wall is not None and not (sweep.unknown or sweep.incomplete):
        metrics.update({"forecast_wall_s_batch_low": wall.low, "forecast_wall_s_batch_high": batch.wall_high or 0.0})
    tags = {"cts.kind": "plan", "cts.sweep_dir": str(plan.sweep_dir)}
    try:
        with tracking.open_mlflow_run(
            tracking.Experiment(plan.tracking["uri"], plan.tracking["experiment"]),
            f"plan:{plan.sweep_dir.name}",
            params=params,
            tags=tags,
            job_dir=plan.sweep_dir / PLAN_DIR,
        ):
            tracking.log_metrics(metrics)
            tracking.log_artifacts(list(paths), "plan")
    except Exception:  # noqa: BLE001 - the forecast is on disk; the sweep must not fail on its tracking
        log.exception("plan: logging the forecast to MLflow failed")
