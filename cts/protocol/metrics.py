"""Job metrics: pure functions over records, with the names the notebooks rely on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from cts.core.records import ArmResult, Record
from cts.core.stages import CLARIFY, before_search
from cts.core.types import UNKNOWN
from cts.protocol.panel import panel_metrics
from cts.protocol.repeats import attribution_metrics, instance_means, repeat_metrics
from cts.stats.bootstrap import DEFAULT_RESAMPLING, Resampling, paired_bootstrap_ci
from cts.stats.cluster import cluster_bootstrap_ci

NAN = float("nan")
USAGE_FIELDS = ("calls", "cache_hits", "tokens_in", "tokens_out", "tokens_reasoning", "truncated", "cost_usd")


def metric_view(record: Record) -> Record:
    """The record as the metrics read it: arms keep score and error only.

    A job keeps this view of every finished instance in memory (the arms'
    answers, labels and trace summaries stay in ``records.jsonl``), so memory
    grows by a few hundred bytes per instance, not by the answers' text.
    """
    return replace(
        record,
        clarified=_arm_view(record.clarified),
        orig=_arm_view(record.orig),
        rewritten_query=None,
        arms={name: view for name, arm in record.arms.items() if (view := _arm_view(arm)) is not None},
    )


def _arm_view(arm: ArmResult | None) -> ArmResult | None:
    """Score and error; a judge panel's member labels too (their agreement is a metric)."""
    if arm is None:
        return None
    return ArmResult(query="", score=arm.score, error=arm.error, judge_members=arm.judge_members)


def score_metrics(records: Sequence[Record], resampling: Resampling) -> dict[str, float]:
    """Score distribution and the paired bootstrap CI of the delta against orig.

    Unscored instances (score None) are excluded explicitly and counted in
    ``n_unscored``; the delta uses only instances where both arms are scored.
    """
    scores = np.array([r.score for r in records if r.score is not None], dtype=float)
    origs = [r.orig_score for r in records if r.orig_score is not None]
    pairs = [(r.score, r.orig_score) for r in records if r.score is not None and r.orig_score is not None]
    out = {
        "n_instances": float(len(records)),
        "n_unscored": float(len(records) - scores.size),
        "n_errors": float(sum(1 for r in records if _has_error(r))),
        "n_paired": float(len(pairs)),
        "orig_score_mean": float(np.mean(origs)) if origs else NAN,
    }
    for name, fn in (
        ("mean", np.mean),
        ("p50", np.median),
        ("p90", lambda a: np.percentile(a, 90)),
        ("min", np.min),
        ("max", np.max),
    ):
        out[f"score_{name}"] = float(fn(scores)) if scores.size else NAN
    clarified_scores, orig_scores = zip(*pairs) if pairs else ((), ())
    mean, low, high = paired_bootstrap_ci(clarified_scores, orig_scores, resampling)
    out.update(delta_mean=mean, delta_ci_low=low, delta_ci_high=high)
    return out


def cluster_metrics(
    records: Sequence[Record], clusters: Mapping[str, str], naive: Mapping[str, float], resampling: Resampling
) -> dict[str, float]:
    """The delta CI when instances share clusters: whole clusters resampled, the naive CI kept beside it.

    Replaces ``delta_ci_low``/``delta_ci_high`` (the instance-level interval moves to
    ``delta_ci_naive_*``) and adds ``n_clusters`` and ``design_effect`` (clustered over naive
    variance of the mean delta, :func:`cts.stats.cluster.design_effect`). An instance
    without a cluster label counts as a cluster of its own.

    Args:
        records: The job's records.
        clusters: Instance id -> cluster label (:func:`cts.data.clusters.dataset_clusters`).
        naive: :func:`score_metrics` of the same records (its instance-level interval).
        resampling: Resamples, confidence level and seed of the bootstrap.
    """
    # In id order: the report reads records.jsonl in completion order, and must draw the same clusters.
    pairs = sorted((r for r in records if r.score is not None and r.orig_score is not None), key=lambda r: r.id)
    labels = [clusters.get(r.id, ("instance", r.id)) for r in pairs]
    scores = [float(r.score) for r in pairs if r.score is not None]
    orig = [float(r.orig_score) for r in pairs if r.orig_score is not None]
    c = cluster_bootstrap_ci(scores, orig, labels, resampling)
    return {
        "delta_ci_low": c.low,
        "delta_ci_high": c.high,
        "delta_ci_naive_low": naive["delta_ci_low"],
        "delta_ci_naive_high": naive["delta_ci_high"],
        "n_clusters": float(c.n_clusters),
        "design_effect": c.design_effect,
    }


def _has_error(r: Record) -> bool:
    arms = (r.clarified, r.orig)
    return r.error is not None or any(a is not None and a.error is not None for a in arms)


def interaction_metrics(records: Sequence[Record], k: int) -> dict[str, float]:
    """UA answerability: unknown rate per answer, all-unknown rate and known counts.

    Only instances whose interaction completed (an answer per question) count.
    An instance with no question has no grounded signal, so it counts as
    all-unknown with ``known_cnt_0``; but a job that asked nothing at all (the
    orig arm) has no interaction to describe: every rate is NaN there, as
    ``ua_unknown_rate`` is (there is no answer to be unknown).
    """
    done = [r for r in records if len(r.answers) == len(r.questions) and not _failed_before_search(r)]
    answers = [a for r in done for a in r.answers]
    known = [sum(a != UNKNOWN for a in r.answers) for r in done] if answers else []
    out = {
        "ua_unknown_rate": float(np.mean([a == UNKNOWN for a in answers])) if answers else NAN,
        "all_unknown_rate": float(np.mean([c == 0 for c in known])) if known else NAN,
    }
    for i in range(max(k, 3) + 1):
        out[f"known_cnt_{i}"] = float(np.mean([c == i for c in known])) if known else NAN
    return out


def questions_asked_mean(records: Sequence[Record]) -> float:
    """Mean number of questions asked per instance (k in batch mode; fewer when sequential stops early).

    Instances whose clarifier failed have no interaction and are left out.
    """
    asked = [len(r.questions) for r in records if not (r.error is not None and r.error.stage == CLARIFY.name)]
    return float(np.mean(asked)) if asked else NAN


def _failed_before_search(r: Record) -> bool:
    return r.error is not None and r.error.stage in before_search()


def usage_metrics(records: Sequence[Record]) -> dict[str, float]:
    """Calls, cache hits, tokens and cost per role and per job (summed over records)."""
    out: dict[str, float] = {"llm_calls": 0.0, "cache_hits": 0.0, "cost_usd": 0.0}
    for r in records:
        for role, u in r.usage.items():
            for f in USAGE_FIELDS:
                out[f"{f}_{role}"] = out.get(f"{f}_{role}", 0.0) + float(u.get(f, 0.0))
            out["llm_calls"] += float(u.get("calls", 0.0))
            out["cache_hits"] += float(u.get("cache_hits", 0.0))
            out["cost_usd"] += float(u.get("cost_usd", 0.0))
    return out


def summarize(
    records: Sequence[Record],
    *,
    k: int,
    resampling: Resampling = DEFAULT_RESAMPLING,
    clusters: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """All job metrics: scores, CI, interaction diagnostics and usage; repeats' spread and arms when there are.

    The score metrics and the paired CI are over :func:`cts.protocol.repeats.instance_means`
    (in id order, whatever order ``records`` come in; with repeats the instance means, and
    ``n_instances`` counts instances); the interaction diagnostics and usage are over every
    record. With ``clusters`` (instance id -> cluster) the delta CI resamples clusters
    (:func:`cluster_metrics`).
    """
    from cts.protocol.diagnostics import diagnostics

    per_instance = instance_means(records)  # one per instance, in id order: the report resamples the same vector
    scores = score_metrics(per_instance, resampling)
    return {
        **scores,
        **(cluster_metrics(per_instance, clusters, scores, resampling) if clusters is not None else {}),
        **interaction_metrics(records, k),
        "questions_asked_mean": questions_asked_mean(records),
        **diagnostics(records),
        **usage_metrics(records),
        **repeat_metrics(records),
        **attribution_metrics(per_instance, resampling),
        **panel_metrics(records),
    }
