"""The calibration slice: the sweep's jobs on their first few instances, as a sweep of its own.

It runs as ``python run.py -m <the same command> limit=<n> plan=false`` (live:
``++services.llm.batch.roles=[]``, as a batch may take its whole window) into
``<sweep dir>.plan/calibration`` (outside the sweep dir, whose report counts every job dir
under it), logging to the experiment ``<experiment>.plan``: the same launcher, jobs, caches
and spend limit as the main run, so the jobs share work in the slice as they will in the sweep,
and the replies it paid for are cache hits of the main run (the cache key does not hold the batch
settings: a batched role of the main run finds the slice's live replies). ``plan.source=<dir>`` reads
an earlier run's job dirs instead and sends nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cts._util.interrupt import entry_script
from cts.compat.job_dirs import stop_reason
from cts.compose.schema import Plan
from cts.core.errors import PlanRefused
from cts.plan.batched import Pipeline, agent_turns, batched_stages
from cts.plan.forecast import BatchShape, JobSlice
from cts.plan.samples import Routes, instance_costs, raw_records, record_run_id, roles_with_requests, run_id

__all__ = [
    "JobPlan",
    "PlanSettings",
    "calibrate",
    "calibration_dir",
    "calibration_slices",
    "plan_settings",
    "slices_from",
]

ACTUAL_FILE = "sweep_actual.json"
_REPLACED = (
    "limit",
    "plan",
    "hydra.sweep.dir",
    "sweep_report",
    "tracking.experiment",
    "services.llm.batch.roles",
    "min_scored",
)
LIVE = "++services.llm.batch.roles=[]"
"""The slice's override: every role live (a batch may take its whole window; the forecast reprices them).
``++``: also when the sweep's own ``services.llm`` config has no ``batch`` node."""


@dataclass(frozen=True)
class PlanSettings:
    """``plan`` (``plan=true`` or ``plan.enabled=true``, each with sub-keys: ``plan=true plan.calibration_n=10``).

    ``run.py`` reads ``plan=<bool>`` as ``plan.enabled=<bool>`` (:mod:`cts._util.switches`);
    a config that holds a bare bool (the compose API given ``plan=true``) stands for the same.

    Attributes:
        enabled: Forecast the sweep before it runs.
        calibration_n: Instances of each job in the calibration slice.
        confidence: Of the forecast's intervals.
        source: A sweep dir of an earlier run of the same configuration, read instead of calibrating.
        calibration: This sweep is a calibration slice (set by :func:`calibration_command`).
        then: ``run`` the sweep after the forecast, or ``stop`` (``plan=only``): forecast, print the
            command that runs it, exit 0.
    """

    enabled: bool = False
    calibration_n: int = 5
    confidence: float = Plan().confidence
    source: str | None = None
    calibration: bool = False
    then: str = "run"

    @property
    def only(self) -> bool:
        """Forecast and stop (``plan=only``, ``plan.then=stop``)."""
        return self.enabled and self.then == "stop"


def plan_settings(cfg: DictConfig) -> PlanSettings:
    """The config's ``plan`` (a bool stands for ``plan.enabled`` with the defaults)."""
    node = OmegaConf.select(cfg, "plan", default=None)
    if node is None or isinstance(node, bool):
        return PlanSettings(enabled=bool(node))
    values = OmegaConf.to_container(node, resolve=True)
    assert isinstance(values, dict)
    return PlanSettings(**{str(k): v for k, v in values.items()})


@dataclass(frozen=True)
class JobPlan:
    """One job of the sweep as the planner sees it: its dir name, instance ids, routes, ``repeats`` and stage order."""

    name: str
    ids: tuple[str, ...]
    routes: Routes
    job_concurrency: int
    job_dir: Path
    repeats: int = 1
    pipeline: Pipeline = Pipeline()

    def runs(self) -> set[str]:
        """Every run the job makes: each instance once per repeat (:func:`cts.plan.samples.run_id`)."""
        return {run_id(i, r) for i in self.ids for r in range(max(1, self.repeats))}


def calibration_dir(sweep_dir: Path) -> Path:
    """Where a sweep's calibration slice runs (beside the sweep dir, never in it)."""
    return sweep_dir.with_name(sweep_dir.name + ".plan") / "calibration"


def _key(arg: str) -> str:
    return arg.lstrip("+~").split("=", 1)[0]


def calibration_command(argv: Sequence[str], n: int, into: Path, experiment: str) -> list[str]:
    """The sweep's own command line, on its first ``n`` instances, into ``into``, with no plan of its own, live."""
    kept = [a for a in argv if _key(a) not in _REPLACED and not _key(a).startswith("plan.")]
    return [
        sys.executable,
        entry_script(),
        *kept,
        f"limit={n}",
        LIVE,
        "plan.calibration=true",
        "sweep_report=false",
        "min_scored=null",  # the slice forecasts cost and time; the sweep itself answers for its scores
        f"hydra.sweep.dir={into}",
        f"tracking.experiment={experiment}.plan",
    ]


def calibrate(argv: Sequence[str], n: int, into: Path, experiment: str) -> None:
    """Run the calibration slice; refuse the plan with its last output lines when it fails."""
    command = calibration_command(argv, n, into, experiment)
    print(f"cts plan: calibration slice, {n} instance(s) per job, in {into}", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise PlanRefused(
            f"error: plan: the calibration slice failed (exit {done.returncode}); nothing else was run:\n{tail}"
        )


def slices_from(source: Path, jobs: Sequence[JobPlan], per_job: int | None = None) -> list[JobSlice]:
    """Each job's :class:`JobSlice` from the records under ``source`` (a calibration or an earlier run).

    A job makes ``repeats`` runs of each instance (each with its own calls, but for the stages
    ``repeat_stages`` replays from repeat 0's cache, which the samples of later repeats show). The
    source's runs are free in the main run (their replies are cached), and so are those the main
    job dir already holds a record of. A job of which the source has no run is unknown, with the
    reason its ``summary.json`` gives (the spend limit stopped the slice, its job failed); one with
    fewer than ``per_job`` instances' runs (the slice's size) was cut short, and says so.
    """
    slices = []
    for job in jobs:
        batched = batched_elsewhere(source / job.name)
        samples = [] if batched else instance_costs(source / job.name, job.routes)
        seen = {record_run_id(r) for r in raw_records(source / job.name)}
        seen |= {record_run_id(r) for r in raw_records(job.job_dir)}
        roles = roles_with_requests(source / job.name)
        runs = job.runs()
        missing, cut = _shortfall(source / job.name, len(samples), _expected(job, per_job))
        missing = batched or missing
        slices.append(
            JobSlice(
                job.name,
                len(runs),
                len(seen & runs),
                tuple(samples),
                unpriced=job.routes.unpriced_used(roles),
                concurrency=dict(job.routes.concurrency),
                job_concurrency=job.job_concurrency,
                missing=missing,
                cut=cut,
                batch=_batch_shape(source / job.name, job, roles),
            )
        )
    return slices


def batched_elsewhere(job_dir: Path) -> str:
    """Why a source job dir's records cannot stand for live runs: its roles went through a Batch API ('' if not).

    A batched call books its batch price and no live request (:mod:`cts.llm._batched`), so such a
    record would forecast batch-price USD and 0 requests for a live sweep. The calibration slice
    always runs live; an earlier run given as ``plan.source`` may not have (its ``config.yaml`` says).
    """
    roles = _batch_roles(job_dir / "config.yaml")
    if not roles:
        return ""
    fresh = {
        role
        for record in raw_records(job_dir)
        for role, row in (record.get("usage") or {}).items()
        if role in roles and (row.get("tokens_in") or row.get("cost_usd"))
    }
    if not fresh:
        return ""
    return (
        f"{job_dir} sent {', '.join(sorted(fresh))} through a Batch API (services.llm.batch.roles): its records hold "
        "batch prices and no live requests; give plan.source a live run, or leave it out for a calibration slice"
    )


def _batch_roles(config: Path) -> set[str]:
    """``services.llm.batch.roles`` of a saved job config, in today's names (none without a readable one)."""
    from cts.compose.stored_config import load_job_config

    try:
        roles = OmegaConf.select(load_job_config(config), "services.llm.batch.roles", default=None)
        return {str(r) for r in roles or ()}
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException):
        return set()  # no config (an older job dir): its records are taken as live


def _batch_shape(job_dir: Path, job: JobPlan, roles: Sequence[str]) -> BatchShape | None:
    """The job's batched roles: their stages on a run's path (the agent's turns from the source's records)."""
    routes = job.routes
    if not routes.batched:
        return None
    turns = agent_turns(list(raw_records(job_dir)), routes.batched)
    unpriced = tuple(rate.unknown for role, rate in routes.batch_rates.items() if rate.unknown and role in roles)
    stages = batched_stages(routes.batched, job.pipeline, turns)
    return BatchShape(routes.batched, stages, routes.batch_window, routes.batch_window_s, unpriced)


def calibration_slices(slices: Sequence[JobSlice]) -> list[JobSlice]:
    """The slices as the calibration itself ran them: every sample a paid run (what its timeline measured)."""
    return [replace(j, n_total=len(j.samples), n_free=0) for j in slices]


def _expected(job: JobPlan, per_job: int | None) -> int | None:
    return None if per_job is None else min(per_job, len(job.ids)) * max(1, job.repeats)


def _shortfall(job_dir: Path, have: int, expected: int | None) -> tuple[str, str]:
    """``(missing, cut)``: why the source has no run of a job, or fewer than ``expected``."""
    stop = stop_reason(_stop_reason(job_dir))
    spend = stop == "spend_limit"
    because = (
        "the spend limit (services.llm.spend.max_usd) stopped the calibration slice"
        if spend
        else f"its job in the calibration slice stopped ({stop})"
        if stop and stop != "done"
        else ""
    )
    if have == 0:
        if because:
            return f"{because} before this job recorded a run", ""
        if job_dir.is_dir():
            return f"its job in the calibration slice recorded no run (see {job_dir / 'run.log'})", ""
        return f"no record of this job in {job_dir.parent}", ""
    if expected is not None and have < expected:
        return "", f"{because or 'the calibration slice stopped'} at {have} of {expected} runs of {job_dir.name}"
    return "", ""


def _stop_reason(job_dir: Path) -> str:
    """The ``stop_reason`` of a job dir's ``summary.json`` (empty when it has none)."""
    try:
        return str(json.loads((job_dir / "summary.json").read_text(encoding="utf-8")).get("stop_reason") or "")
    except (OSError, ValueError):
        return ""
