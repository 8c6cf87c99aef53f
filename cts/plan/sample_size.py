"""The sample size a claim needs, from a finished pilot sweep's paired deltas (clarified - orig).

Per job: the per-instance deltas (the mean over an instance's repeats when the records carry
``repeat``; clusters when they carry ``cluster``), their spread, the correlation of the two
arms' scores, then :mod:`cts.stats.power`: the minimum detectable effect at the pilot's size
and the instances needed for the asked delta, with what running the extra ones would cost
(the pilot's per-instance USD, as the forecast extrapolates it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from cts.compat.records import upgrade_record
from cts.compose.schema import Plan
from cts.plan.forecast import Interval, sum_interval
from cts.plan.samples import Routes, instance_costs, raw_records, roles_with_requests, routes_of
from cts.stats.power import PairedDeltas, Variance, detectable_effect, instances_needed, variance_of

__all__ = ["SampleSize", "pilot_deltas", "sample_size", "sample_size_markdown"]

REPEATS = (1, 2, 3, 5)
"""Repeats per instance the answer is also given for, when the pilot's runs of an instance differ."""


@dataclass(frozen=True)
class SampleSize:
    """One job's answer.

    Attributes:
        job: The job dir's name.
        variance: The pilot's variance components.
        mean_delta: The pilot's mean paired delta.
        correlation: Of the clarified and orig scores over the pilot's instances (nan: undefined).
        mde: The minimum detectable effect at the pilot's size.
        needed: Instances needed for the asked delta (at the pilot's repeats).
        extra_usd: Forecast USD of the instances beyond the pilot's (the priced models' part).
        unpriced: Models the job calls that have no price (the USD is then unknown).
    """

    job: str
    variance: Variance
    mean_delta: float
    correlation: float
    mde: float
    needed: int
    extra_usd: Interval
    unpriced: tuple[str, ...] = ()
    by_repeats: Mapping[int, int] = field(default_factory=dict)
    """Repeats per instance -> instances needed, when the pilot's repeats differ (its records carry ``repeat``)."""


def _scores(record: Mapping[str, Any]) -> tuple[float, float] | None:
    arm = upgrade_record(record).get("clarified") or {}
    orig = record.get("orig") or {}
    a, b = arm.get("score"), orig.get("score")
    return None if a is None or b is None or record.get("error") else (float(a), float(b))


def pilot_deltas(records: Iterable[Mapping[str, Any]]) -> tuple[PairedDeltas, list[tuple[float, float]]]:
    """Paired deltas per instance (one per repeat) and clusters, plus the score pairs, from raw records."""
    runs: dict[tuple[str, Any], tuple[float, float]] = {}
    clusters: dict[str, str] = {}
    for r in records:
        pair = _scores(r)
        if pair is None:
            continue
        runs[(str(r["id"]), r.get("repeat", 0))] = pair  # the last record of an (instance, repeat)
        if r.get("cluster") is not None:
            clusters[str(r["id"])] = str(r["cluster"])
    deltas: dict[str, list[float]] = {}
    for (iid, _), (a, b) in runs.items():
        deltas.setdefault(iid, []).append(a - b)
    return PairedDeltas(deltas, clusters), list(runs.values())


def _summary_clusters(job_dir: Path) -> dict[str, str]:
    """Instance id -> cluster from the job's ``summary.json`` (empty for an unclustered job)."""
    from cts.data.clusters import summary_clusters

    path = job_dir / "summary.json"
    return summary_clusters(json.loads(path.read_text(encoding="utf-8")))[1] if path.is_file() else {}


def sample_size(
    job_dir: Path, delta: float, power: float = 0.8, alpha: float = 0.05, confidence: float = Plan().confidence
) -> SampleSize:
    """The planner's answer for one finished job dir (see the module docstring)."""
    records = list(raw_records(job_dir))
    pilot, pairs = pilot_deltas(records)
    if not pilot.clusters:  # a job run with dataset.cluster_field names each instance's cluster in summary.json
        pilot = replace(pilot, clusters=_summary_clusters(job_dir))
    var = variance_of(pilot)
    a, b = np.asarray(pairs, dtype=float).T
    corr = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan")
    needed = instances_needed(delta, var, power=power, alpha=alpha)
    return SampleSize(
        job_dir.name,
        var,
        float(np.mean([np.mean(d) for d in pilot.deltas.values()])),
        corr,
        detectable_effect(var.n, var, power=power, alpha=alpha),
        needed,
        *_extra_usd(job_dir, max(0, needed - var.n) * var.repeats, confidence),
        {r: instances_needed(delta, var, power=power, alpha=alpha, repeats=r) for r in REPEATS} if var.within else {},
    )


def _extra_usd(job_dir: Path, runs: int, confidence: float) -> tuple[Interval, tuple[str, ...]]:
    """USD of ``runs`` more instance runs like the pilot's, and the models it calls that have no price."""
    from cts.compose.probes import task_groups
    from cts.compose.stored_config import load_job_config

    config = job_dir / ".hydra" / "config.yaml"
    routes = Routes({}, {}, {})  # a job dir without its config: the records' USD as they are
    unpriced: tuple[str, ...] = ()
    if config.exists():  # in today's names: an older job dir's keys and _target_ paths are renamed
        cfg = load_job_config(config)
        routes = routes_of(cfg, task_groups(cfg))
        unpriced = routes.unpriced_used(roles_with_requests(job_dir))
    costs = instance_costs(job_dir, routes)
    return sum_interval([c.counts["usd"] for c in costs], runs, confidence), unpriced


def sample_size_markdown(rows: Sequence[SampleSize], delta: float, power: float, alpha: float) -> str:
    """One row per job: pilot size, spread, correlation, MDE, instances needed and their extra cost."""
    lines = [
        f"Sample size for a paired delta of {delta:g} points (power {power:g}, two-sided alpha {alpha:g})",
        "",
        "| job | n | repeats | mean delta | sd delta | corr(clarified, orig) | icc | MDE at n | "
        f"instances for {delta:g} | extra USD |",
        "|" + "---|" * 10,
    ]
    for r in rows:
        v = r.variance
        usd = f"${r.extra_usd.expected:.4f} [{r.extra_usd.low:.4f}-{r.extra_usd.high:.4f}]"
        if r.unpriced:
            usd = f"unknown (no price: {', '.join(r.unpriced)}; priced models {usd})"
        sd = float(np.sqrt(v.per_instance(v.repeats)))
        lines.append(
            f"| {r.job} | {v.n} | {v.repeats} | {r.mean_delta:.2f} | {sd:.2f} | {r.correlation:.2f} | "
            f"{v.icc:.2f} | {r.mde:.2f} | {r.needed} | {usd} |"
        )
    notes = [
        f"{r.job}: instances for {delta:g} with " + ", ".join(f"{k} repeat(s): {n}" for k, n in r.by_repeats.items())
        for r in rows
        if r.by_repeats
    ]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"
