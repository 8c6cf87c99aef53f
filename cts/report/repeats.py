"""Sweep-report tables of repeats, attribution arms and variance by stage (shown only when jobs have them).

Every number is recomputed from the jobs' records: scores reduce per instance first
(the mean over its repeats, :func:`cts.protocol.repeats.instance_means`), so every CI counts
instances. :func:`design_report` is the one hook the sweep report calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from cts.core.stages import resampled_roles
from cts.protocol.repeats import (
    PASS_THRESHOLD,
    attribution_metrics,
    flip_rate,
    has_repeats,
    instance_means,
    marginal_steps,
    pass_counts,
    pass_metrics,
    repeat_metrics,
)
from cts.report.jobs import Job
from cts.report.tables import Table
from cts.stats.bootstrap import Resampling, paired_bootstrap_ci
from cts.stats.variance import stage_shares

NAN = float("nan")


def _fmt(v: Any, signed: bool = False) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:+.3f}" if signed else f"{v:.3f}"


def _ci(row: dict[str, Any], name: str) -> str:
    return (
        f"{_fmt(row[f'{name}_mean'], True)} [{_fmt(row[f'{name}_ci_low'], True)}, {_fmt(row[f'{name}_ci_high'], True)}]"
    )


def _stages(job: Job) -> tuple[str, ...]:
    """The stages the job's repeats re-sampled (empty: all of them)."""
    found = {r.resampled for r in job.records if r.resampled}
    return tuple(sorted({s for stages in found for s in stages}))


def _delta(reduced: Sequence[Any], bootstrap: Resampling) -> dict[str, float]:
    pairs = [(r.score, r.orig_score) for r in reduced if r.score is not None and r.orig_score is not None]
    mean, low, high = paired_bootstrap_ci([p[0] for p in pairs], [p[1] for p in pairs], bootstrap)
    return {"n": float(len(pairs)), "delta_mean": mean, "delta_ci_low": low, "delta_ci_high": high}


def repeats_rows(jobs: Sequence[Job], bootstrap: Resampling, pass_threshold: float = PASS_THRESHOLD) -> pd.DataFrame:
    """Per job that repeated every stage: repeats, spread within instances, Δ vs orig over instance means, pass^k."""
    rows = []
    for j in jobs:
        if j.is_orig or not has_repeats(j.records) or _stages(j):
            continue
        reduced = instance_means(list(j.records))
        scores = [r.score for r in reduced if r.score is not None]
        rows.append(
            {
                "k": j.k,
                "system": j.label,
                **_delta(reduced, bootstrap),
                "score": float(sum(scores) / len(scores)) if scores else NAN,
                **repeat_metrics(j.records),
                **pass_metrics(j.records, pass_threshold),
            }
        )
    return pd.DataFrame(rows)


def repeats_table(rows: pd.DataFrame, confidence: float, pass_threshold: float = PASS_THRESHOLD) -> Table:
    """Repeats: each instance run several times; spread within instances, the CI over instance means, pass^k."""
    out = []
    for r in rows.to_dict("records"):
        k = int(r["repeats"])
        out.append(
            {
                "k": r["k"],
                "System": r["system"],
                "n": int(r["n"]),
                "repeats": k,
                "Score": _fmt(r["score"]),
                "SD within": _fmt(r["score_within_sd"]),
                "ICC": _fmt(r["score_icc"]),
                f"Δ vs orig [{confidence:.0%} CI]": _ci(r, "delta"),
                "Δ SD within": _fmt(r["delta_within_sd"]),
                "orig SD within": _fmt(r["orig_within_sd"]),
                "pass^1": _fmt(r.get("pass_hat_1", NAN)),
                f"pass^{k}": _fmt(r.get(f"pass_hat_{k}", NAN)),
                "flaky": _fmt(r.get("flaky_rate", NAN)),
                "flip rate": _fmt(r.get("flip_rate", NAN)),
            }
        )
    caption = (
        "Repeats: scores are instance means over the repeats; SD within = mean per-instance SD across "
        "repeats; ICC = share of the score's variance between instances (1: repeats agree); "
        f"pass^k = chance that k repeats all score >= {pass_threshold:g} (pass^1: the pass rate); "
        "flaky = share of instances that both pass and fail; flip rate = mean share of an instance's "
        "pairs of repeats whose pass/fail differ"
    )
    return Table("repeats", caption, rows, pd.DataFrame(out))


def flip_rows(jobs: Sequence[Job], pass_threshold: float = PASS_THRESHOLD) -> pd.DataFrame:
    """Per repeated job, every instance that both passed and failed: its passes and its flip rate."""
    rows = []
    for j in jobs:
        if j.is_orig or not has_repeats(j.records) or _stages(j):
            continue
        for instance, (c, n) in sorted(pass_counts(j.records, pass_threshold).items()):
            if 0 < c < n:
                rows.append(
                    {
                        "k": j.k,
                        "system": j.label,
                        "instance": instance,
                        "passes": c,
                        "repeats": n,
                        "flip_rate": flip_rate(c, n),
                    }
                )
    return pd.DataFrame(rows)


def attribution_rows(jobs: Sequence[Job], bootstrap: Resampling) -> pd.DataFrame:
    """Per job with attribution arms: Δ vs orig split into the rewrite's effect and the answers' information."""
    rows = []
    for j in jobs:
        reduced = instance_means(list(j.records))
        if j.is_orig or not any(r.arms for r in reduced):
            continue
        rows.append(
            {
                "k": j.k,
                "system": j.label,
                **_delta(reduced, bootstrap),
                **attribution_metrics(reduced, bootstrap),
                "steps": len(marginal_steps(reduced)),
            }
        )
    return pd.DataFrame(rows)


def attribution_table(rows: pd.DataFrame, confidence: float) -> Table:
    """Attribution: Δ(clarified − orig) = rewrite (withheld − orig) + answers (clarified − withheld)."""
    out = []
    for r in rows.to_dict("records"):
        cell = {
            "k": r["k"],
            "System": r["system"],
            "n": int(r["n"]),
            f"Δ vs orig [{confidence:.0%} CI]": _ci(r, "delta"),
        }
        for name, label in (
            ("delta_rewrite", "rewrite (withheld−orig)"),
            ("delta_answers", "answers (clarified−withheld)"),
            ("delta_oracle", "oracle−orig"),
            ("gap_oracle", "oracle−clarified"),
        ):
            cell[label] = _ci(r, name) if f"{name}_mean" in r and not _nan(r[f"{name}_mean"]) else "–"
        marginal = [_fmt(r.get(f"marginal_q{i}_mean", NAN), True) for i in range(1, int(r["steps"]) + 1)]
        cell["marginal per question"] = " / ".join(marginal) if marginal else "–"
        out.append(cell)
    caption = (
        "Attribution arms: what rewriting alone does (answers withheld), what the answers add, the ceiling "
        "(the intent searched), and each further question's marginal value (answers 1..i)"
    )
    return Table("attribution", caption, rows, pd.DataFrame(out))


def _nan(v: Any) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


def stage_rows(jobs: Sequence[Job]) -> pd.DataFrame:
    """Per (k, system): each re-sampled stage's variance and its share of the score's variance."""
    groups: dict[tuple[int, str], dict[str, list[list[float]]]] = {}
    for j in jobs:
        stages = _stages(j)
        if j.is_orig or not stages or not has_repeats(j.records):
            continue
        per_instance: dict[str, list[float]] = {}
        for r in j.records:
            if r.score is not None:
                per_instance.setdefault(r.id, []).append(r.score)
        groups.setdefault((j.k, j.system), {})["+".join(stages)] = list(per_instance.values())
    rows = []
    for (k, system), found in sorted(groups.items()):
        by_stage = dict(sorted(found.items(), key=lambda item: _stage_rank(item[0])))
        shares, total, remainder = stage_shares(by_stage)
        for s in shares:
            rows.append(
                {
                    "k": k,
                    "system": system,
                    "stage": s.stage,
                    "n": float(s.n_groups),
                    "variance": s.variance,
                    "sd": math.sqrt(s.variance) if s.variance >= 0 else NAN,
                    "share": s.share,
                    "total_variance": total,
                }
            )
        rows.append(
            {
                "k": k,
                "system": system,
                "stage": "instances (rest)",
                "n": NAN,
                "variance": NAN,
                "sd": NAN,
                "share": remainder,
                "total_variance": total,
            }
        )
    return pd.DataFrame(rows)


def _stage_rank(stages: str) -> tuple[int, ...]:
    """Stages in pipeline order (clarifier first), a combination after its first stage."""
    order = resampled_roles()
    return tuple(order.index(s) for s in stages.split("+"))


def stage_table(rows: pd.DataFrame) -> Table:
    """Variance by stage: one stage re-sampled per job, the others replayed from the cache."""
    display = pd.DataFrame(
        [
            {
                "k": r["k"],
                "System": r["system"],
                "Stage": r["stage"],
                "n": "–" if _nan(r["n"]) else int(r["n"]),
                "Variance": _fmt(r["variance"]),
                "SD": _fmt(r["sd"]),
                "Share of score variance": _fmt(r["share"]),
            }
            for r in rows.to_dict("records")
        ]
    )
    caption = (
        "Variance by stage: each stage re-sampled alone (every other stage replayed from the cache); its "
        "within-instance variance over the score's variance; the rest is the instances' own spread"
    )
    return Table("stage_variance", caption, rows, display)


def design_report(jobs: Sequence[Job], bootstrap: Resampling, pass_threshold: float = PASS_THRESHOLD) -> list[Table]:
    """The repeats (with the flaky instances), attribution and variance-by-stage tables the jobs call for (none for plain jobs)."""
    tables = []
    if not (rows := repeats_rows(jobs, bootstrap, pass_threshold)).empty:
        tables.append(repeats_table(rows, bootstrap.confidence, pass_threshold))
    if not (flips := flip_rows(jobs, pass_threshold)).empty:
        shown = flips.assign(flip_rate=flips["flip_rate"].map(_fmt))
        caption = f"Flaky instances: passes (score >= {pass_threshold:g}) out of the repeats, and the flip rate"
        tables.append(Table("repeat_flips", caption, flips, shown))
    if not (rows := attribution_rows(jobs, bootstrap)).empty:
        tables.append(attribution_table(rows, bootstrap.confidence))
    if not (rows := stage_rows(jobs)).empty:
        tables.append(stage_table(rows))
    return tables
