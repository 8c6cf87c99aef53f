"""Judge robustness (paper Table 9): re-judge the frozen answers of finished runs.

Every clarified and orig arm of the source jobs is judged again by each judge; the
report gives each condition's score per judge (a condition is a job's system at its k,
``rules_scope-k1``, or the pooled ``orig``), whether the ordering of conditions matches
the reference judge's, Kendall's tau between the rankings, and Cohen's kappa on the
per-nugget full/partial/none labels of every pair of judges. No clarify or search
call is made.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np
import pandas as pd

from cts.analysis.common import bounded
from cts.core.contracts import Judge
from cts.core.records import ArmResult, infra_stop
from cts.core.scoring import restore_score
from cts.core.types import LABELS, Gold, Label
from cts.report.jobs import ORIG, Job
from cts.report.tables import Table
from cts.stats.bootstrap import cohen_kappa, kendall_tau
from cts.tracking import Assessed

log = logging.getLogger(__name__)

RECORDED = "recorded"
"""Pseudo-judge name for the labels stored in the source records (the run's own judge)."""
NAN = float("nan")


@dataclass(frozen=True)
class FrozenArm:
    """One frozen answer to re-judge, and the condition it belongs to."""

    condition: str
    """``orig`` or ``<label>-k<k>`` (:func:`condition_name`)."""
    instance_id: str
    answer: str
    recorded: Mapping[str, Label] = field(default_factory=dict)
    """The labels the source run's judge gave."""

    @property
    def key(self) -> tuple[str, str]:
        """Identity of the judging work: identical answers to one instance are judged once."""
        return self.instance_id, self.answer


def condition_name(job: Job) -> str:
    """A job's condition in Table 9: its report label (the system, plus varying factors) at its k (``rules_scope-k1``)."""
    return ORIG if job.is_orig else f"{job.label}-k{job.k}"


def _judgeable(arm: ArmResult | None) -> TypeGuard[ArmResult]:
    # An arm whose search failed has no answer; one whose judge failed does.
    return arm is not None and (arm.error is None or arm.error.stage == "judge")


def frozen_arms(jobs: Sequence[Job]) -> list[FrozenArm]:
    """Every judgeable clarified and orig answer of ``jobs`` (orig arms pooled as ``orig``).

    Every repeat's answer is judged (identical answers once); :func:`score_frame` then reduces
    per instance, to the mean over its repeats, as the job's metrics do.
    """
    arms: list[FrozenArm] = []
    for job in jobs:
        for r in sorted(job.records, key=lambda r: (r.id, r.repeat)):  # not the order they finished in
            if _judgeable(r.orig):
                arms.append(FrozenArm(ORIG, r.id, r.orig.answer, dict(r.orig.labels)))
            if not job.is_orig and _judgeable(r.clarified):
                arms.append(FrozenArm(condition_name(job), r.id, r.clarified.answer, dict(r.clarified.labels)))
    return arms


async def judge_all(
    arms: Sequence[FrozenArm], gold: Mapping[str, Gold], judges: Mapping[str, Judge], concurrency: int = 8
) -> dict[str, dict[tuple[str, str], Mapping[str, Label] | None]]:
    """Labels per judge per unique (instance, answer); None where the judge failed."""
    keys = list(dict.fromkeys(a.key for a in arms if a.instance_id in gold))

    def call(judge: Judge, key: tuple[str, str]) -> Callable[[], Awaitable[Mapping[str, Label] | None]]:
        async def run() -> Mapping[str, Label] | None:
            try:
                return await judge.judge(key[1], gold[key[0]].nuggets)
            except Exception as e:  # noqa: BLE001 - an unscored item is excluded, never 0...
                if infra_stop(e):
                    raise  # ...but the spend limit, an open circuit or a dead endpoint stops the analysis
                log.warning("judge failed on %s: %s", key[0], e)
                return None

        return run

    out = {}
    for name, judge in judges.items():
        labels = await bounded([call(judge, key) for key in keys], concurrency)
        out[name] = dict(zip(keys, labels))
    return out


def _score(labels: Mapping[str, Label] | None, gold: Gold) -> float | None:
    if not labels:
        return None
    try:
        return restore_score(labels, gold.nuggets)
    except ValueError:  # labels of another gold version (missing nugget ids)
        return None


def score_frame(
    arms: Sequence[FrozenArm], gold: Mapping[str, Gold], labels: Mapping[str, Mapping[tuple[str, str], Any]]
) -> pd.DataFrame:
    """Long table ``judge, condition, instance_id, score``: one row per instance.

    A condition's answers to one instance (its repeats) are averaged, as
    :func:`cts.protocol.repeats.instance_means` averages their recorded scores; the orig answers
    of one instance are averaged over every job and repeat.
    """
    rows = [
        {
            "judge": j,
            "condition": a.condition,
            "instance_id": a.instance_id,
            "score": _score(by_key.get(a.key), gold[a.instance_id]),
        }
        for j, by_key in labels.items()
        for a in arms
        if a.instance_id in gold
    ]
    df = pd.DataFrame(rows, columns=["judge", "condition", "instance_id", "score"])
    df["score"] = df["score"].astype(float)
    return df.groupby(["judge", "condition", "instance_id"], sort=False, as_index=False)["score"].mean()


def condition_means(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean score per judge (rows) and condition (columns) over instances every judge scored."""
    wide = scores.pivot_table(index=["condition", "instance_id"], columns="judge", values="score", aggfunc="mean")
    common = wide.dropna()
    means = common.groupby(level="condition").mean().T
    means = means.loc[[j for j in dict.fromkeys(scores["judge"]) if j in means.index]]  # config order
    conditions = [ORIG] + sorted(c for c in means.columns if c != ORIG)
    return means[[c for c in conditions if c in means.columns]]


def ordering(means: pd.Series) -> str:
    """``A > B = C`` from best to worst (equal means within 1e-9 are ties)."""
    ranked = means.sort_values(ascending=False, kind="stable")
    text, last = "", None
    for condition, value in ranked.items():
        if last is not None:
            text += " = " if math.isclose(value, last, abs_tol=1e-9) else " > "
        text += str(condition)
        last = value
    return text


def _rank_key(means: pd.Series) -> tuple[tuple[str, ...], ...]:
    groups: dict[float, list[str]] = {}
    for condition, value in means.items():
        groups.setdefault(round(float(value), 9), []).append(str(condition))
    return tuple(tuple(sorted(groups[v])) for v in sorted(groups, reverse=True))


def table9(means: pd.DataFrame, reference: str) -> Table:
    """Table 9: score of each condition per judge, ordering, same-as-reference, tau vs reference."""
    ref = means.loc[reference]
    data = means.copy()
    data.insert(0, "judge", data.index)
    data["ordering"] = [ordering(means.loc[j]) for j in means.index]
    data["same_ordering"] = [_rank_key(means.loc[j]) == _rank_key(ref) for j in means.index]
    data["kendall_tau"] = [kendall_tau(ref.values, means.loc[j].values) for j in means.index]
    data = data.reset_index(drop=True)
    display = pd.DataFrame({"Judge": data["judge"]})
    for c in means.columns:
        display[c] = data[c].map(lambda v: "–" if not math.isfinite(v) else f"{v:.2f}")
    display["Ordering"] = data["ordering"]
    display[f"same as {reference}"] = data["same_ordering"].map({True: "yes", False: "no"})
    display["Kendall τ"] = data["kendall_tau"].map(lambda v: "–" if not math.isfinite(v) else f"{v:.3f}")
    caption = (
        f"Table 9. Judge robustness: mean restore_score_100 per system and k under each judge "
        f"(instances scored by every judge); ordering and Kendall's tau vs. {reference}."
    )
    return Table("judge_table9", caption, data, display)


def tau_table(means: pd.DataFrame) -> Table:
    """Kendall's tau between the condition rankings of every pair of judges."""
    rows = [
        {
            "judge_a": a,
            "judge_b": b,
            "n_conditions": len(means.columns),
            "kendall_tau": kendall_tau(means.loc[a].values, means.loc[b].values),
        }
        for a, b in itertools.combinations(means.index, 2)
    ]
    data = pd.DataFrame(rows, columns=["judge_a", "judge_b", "n_conditions", "kendall_tau"])
    display = data.assign(kendall_tau=data["kendall_tau"].map(lambda v: "–" if not math.isfinite(v) else f"{v:.3f}"))
    caption = "Kendall's tau between the rankings of the conditions (system and k) by each pair of judges."
    return Table("judge_tau", caption, data, display)


def kappa_table(labels: Mapping[str, Mapping[tuple[str, str], Mapping[str, Label] | None]]) -> Table:
    """Cohen's kappa on full/partial/none per nugget, for every pair of judges."""
    rows = []
    for a, b in itertools.combinations(labels, 2):
        pairs = [
            (la[n], lb[n]) for key, la in labels[a].items() if la and (lb := labels[b].get(key)) for n in la if n in lb
        ]
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        agree = float(np.mean([x == y for x, y in pairs])) if pairs else NAN
        rows.append(
            {
                "judge_a": a,
                "judge_b": b,
                "n_labels": len(pairs),
                "agreement": agree,
                "kappa": cohen_kappa(xs, ys, LABELS),
            }
        )
    data = pd.DataFrame(rows, columns=["judge_a", "judge_b", "n_labels", "agreement", "kappa"])
    fmt = {c: (lambda v: "–" if not math.isfinite(v) else f"{v:.3f}") for c in ("agreement", "kappa")}
    display = data.assign(**{c: data[c].map(f) for c, f in fmt.items()})
    return Table(
        "judge_kappa",
        "Per-nugget agreement (full/partial/none) between judges: raw agreement and Cohen's kappa.",
        data,
        display,
    )


def recorded_labels(arms: Sequence[FrozenArm]) -> dict[tuple[str, str], Mapping[str, Label] | None]:
    """The source runs' own labels per (instance, answer), as a pseudo-judge."""
    return {a.key: (dict(a.recorded) or None) for a in arms}


async def rejudge(
    jobs: Sequence[Job],
    gold: Mapping[str, Gold],
    judges: Mapping[str, Judge],
    *,
    include_recorded: bool = True,
    concurrency: int = 8,
) -> tuple[pd.DataFrame, dict[str, dict[tuple[str, str], Mapping[str, Label] | None]]]:
    """Re-judge the frozen answers of ``jobs``: per-instance scores and labels per judge."""
    arms = frozen_arms(jobs)
    missing = {a.instance_id for a in arms} - set(gold)
    if missing:
        log.warning("%d instance(s) of the source runs have no gold and are skipped", len(missing))
    labels = await judge_all(arms, gold, judges, concurrency)
    if include_recorded:
        labels = {RECORDED: recorded_labels(arms), **labels}
    return score_frame(arms, gold, labels), labels


def judge_report(
    scores: pd.DataFrame, labels: Mapping[str, Mapping[tuple[str, str], Any]], reference: str
) -> list[Table]:
    """Table 9, the pairwise tau table and the kappa table."""
    means = condition_means(scores)
    if reference not in means.index:
        raise ValueError(f"reference judge {reference!r} is not among {list(means.index)}")
    return [table9(means, reference), tau_table(means), kappa_table(labels)]


def judge_metrics(tables: Sequence[Table]) -> dict[str, float]:
    """Flat metrics: ``tau.<judge>``, ``same_ordering.<judge>``, ``kappa.<a>.<b>``."""
    t9, _, kappa = tables
    out = {f"tau.{r.judge}": float(r.kendall_tau) for r in t9.data.itertuples()}
    out.update({f"same_ordering.{r.judge}": float(r.same_ordering) for r in t9.data.itertuples()})
    out.update({f"kappa.{r.judge_a}.{r.judge_b}": float(r.kappa) for r in kappa.data.itertuples()})
    return out


def judge_feedback(
    jobs: Sequence[Job], gold: Mapping[str, Gold], labels: Mapping[str, Mapping[tuple[str, str], Any]]
) -> list[tuple[str, str, Assessed]]:
    """Per job, instance and judge: the re-judged score of the clarified answer, as feedback on its trace.

    Named ``restore_score_100.<judge>`` beside the run's own ``restore_score_100``; the
    rationale gives the judge's labels, the metadata their agreement with the run's labels.
    An instance's trace gets one score per judge: its first repeat's (the run's traces are found
    by instance, :func:`cts.tracking.trace_ids_of_runs`).
    """
    out = []
    for job in jobs:
        for r in job.records:
            if r.repeat or not job.run_id or not _judgeable(r.clarified) or r.id not in gold:
                continue
            key, recorded = (r.id, r.clarified.answer), dict(r.clarified.labels)
            for judge, by_key in labels.items():
                if judge != RECORDED:
                    out.append((job.run_id, r.id, _rejudged(judge, by_key.get(key), recorded, gold[r.id])))
    return out


def _rejudged(judge: str, labels: Mapping[str, Label] | None, recorded: Mapping[str, Label], gold: Gold) -> Assessed:
    name = f"restore_score_100.{judge}"
    if not labels:
        return Assessed(name, None, "LLM_JUDGE", judge, error=("judge_failed", "this judge gave no labels"))
    same = [labels[n] == recorded[n] for n in labels if n in recorded]
    agreement = f"{float(np.mean(same)):.3f}" if same else "nan"
    text, score = " ".join(f"{n}={v}" for n, v in labels.items()), _score(labels, gold)
    why = f"{text} (run's judge: {' '.join(f'{n}={v}' for n, v in recorded.items())})"
    meta = {"analysis": "judge_robustness", "labels": text, "agreement_with_run": agreement}
    unscored = None if score is not None else ("unscored", "labels of another gold version")
    return Assessed(name, score, "LLM_JUDGE", judge, why, meta, unscored)
