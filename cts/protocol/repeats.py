"""Metrics of repeats and attribution arms: pure functions over records.

With repeats, an instance has one record per repeat. The job's scores reduce per
instance first (:func:`instance_means`: the mean over its repeats), so the paired CI
and every score statistic count instances, not repeats; the spread between repeats
is reported apart (:func:`repeat_metrics`). A job without repeats keeps its records, in
id order. With attribution arms, :func:`attribution_metrics` decomposes the delta
against orig (:mod:`cts.protocol.arms`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from cts.core.records import ArmResult, Record
from cts.stats.bootstrap import Resampling, paired_bootstrap_ci
from cts.stats.variance import mean_within_sd, one_way

NAN = float("nan")


def by_instance(records: Iterable[Record]) -> dict[str, list[Record]]:
    """Records grouped by instance id, in order of first appearance."""
    groups: dict[str, list[Record]] = {}
    for r in records:
        groups.setdefault(r.id, []).append(r)
    return groups


def has_repeats(records: Sequence[Record]) -> bool:
    """Whether any record is of a repeat beyond the first."""
    return any(r.repeat > 0 for r in records)


def _mean_arm(arms: Sequence[ArmResult | None]) -> ArmResult | None:
    """One arm whose score is the mean over the scored repeats (unscored, with the first error, if none is).

    It keeps the first repeat's query: a gate decides on the orig arm's query (the blurred ``q``).
    """
    present = [a for a in arms if a is not None]
    if not present:
        return None
    query = present[0].query
    scores = [a.score for a in present if a.score is not None]
    if scores:
        return ArmResult(query=query, score=float(np.mean(scores)))
    return ArmResult(query=query, error=next((a.error for a in present if a.error is not None), None))


def instance_means(records: Sequence[Record]) -> list[Record]:
    """One record per instance, in id order, each arm scored with the mean over its repeats.

    The reduction every per-instance statistic starts from: the job's metrics, the report's
    tables, post-hoc gating and the robustness analyses. Without repeats the records are
    returned as they are, sorted. The reduced record keeps repeat 0's interaction (questions,
    answers, usage) and the first error any repeat had. The id order is the one canonical order
    of a bootstrap's vector: the job holds its records in dataset order and the report reads
    them in the order they finished, and both must resample the same vector.
    """
    if not has_repeats(records):
        return sorted(records, key=lambda r: r.id)
    out = []
    for _, finished in sorted(by_instance(records).items()):
        group = sorted(finished, key=lambda r: r.repeat)  # repeat 0 first, whatever order they finished in
        names = dict.fromkeys(n for r in group for n in r.arms)
        error = next((r.error for r in group if r.error is not None), None)
        out.append(
            replace(
                group[0],
                clarified=_mean_arm([r.clarified for r in group]),
                orig=_mean_arm([r.orig for r in group]),
                error=error,
                arms={n: arm for n in names if (arm := _mean_arm([r.arms.get(n) for r in group])) is not None},
            )
        )
    return out


def _groups(records: Sequence[Record], score: str) -> list[list[float]]:
    out = []
    for group in by_instance(records).values():
        values = [_score(r, score) for r in group]
        out.append([v for v in values if v is not None])
    return out


def _score(r: Record, name: str) -> float | None:
    """An arm's score of one record (``delta``: clarified − orig of the same repeat)."""
    if name == "delta":
        return None if r.score is None or r.orig_score is None else r.score - r.orig_score
    arm = {"clarified": r.clarified, "orig": r.orig}.get(name) or r.arms.get(name)
    return arm.score if arm is not None else None


def repeat_metrics(records: Sequence[Record]) -> dict[str, float]:
    """Repeats and their spread; empty for a job without repeats (its metrics stay as they were).

    ``score_within_sd`` is the mean over instances of the SD of their clarified scores
    across repeats; ``score_icc`` the share of the score's variance between instances
    (one-way random effects, :func:`cts.stats.variance.one_way`): 1 when repeats agree.
    ``delta_*`` are of the paired difference per repeat, ``orig_*`` of the orig arm.
    """
    if not has_repeats(records):
        return {}
    groups = by_instance(records)
    out = {"repeats": float(max(len(g) for g in groups.values())), "n_records": float(len(records))}
    for name, prefix in (("clarified", "score"), ("orig", "orig"), ("delta", "delta")):
        values = _groups(records, name)
        parts = one_way(values)
        out.update(
            {
                f"{prefix}_within_sd": mean_within_sd(values),
                f"{prefix}_icc": parts.icc,
                f"{prefix}_var_between": parts.between,
                f"{prefix}_var_within": parts.within,
            }
        )
    return out


PASS_THRESHOLD = 50.0
"""Default restore_score_100 at or above which a run of an instance passes (half the weighted nuggets)."""


def pass_counts(records: Sequence[Record], threshold: float = PASS_THRESHOLD) -> dict[str, tuple[int, int]]:
    """Per instance with a scored repeat: ``(passes, scored repeats)`` of the clarified arm (score >= threshold)."""
    out = {}
    for instance, group in by_instance(records).items():
        scores = [r.score for r in group if r.score is not None]
        if scores:
            out[instance] = (sum(s >= threshold for s in scores), len(scores))
    return out


def flip_rate(passes: int, n: int) -> float:
    """Share of pairs of an instance's repeats whose pass/fail differ: ``2 c (n - c) / (n (n - 1))`` (NaN for n < 2)."""
    return 2.0 * passes * (n - passes) / (n * (n - 1)) if n >= 2 else NAN


def pass_metrics(records: Sequence[Record], threshold: float = PASS_THRESHOLD) -> dict[str, float]:
    """pass^j for j = 1..k repeats, the flaky share and the mean flip rate (tau-bench's pass^k).

    ``pass_hat_<j>`` is the chance that j repeats drawn without replacement from an instance's
    n all pass, ``C(c, j) / C(n, j)`` for c passes, averaged over the instances with at least j
    scored repeats (Yao et al. 2024, tau-bench): pass^1 is the pass rate, pass^n the share of
    instances that pass in every repeat. ``flaky_rate`` is the share of instances that both pass
    and fail; ``flip_rate`` the mean over instances of :func:`flip_rate`.
    """
    counts = pass_counts(records, threshold)
    if not counts:
        return {}
    top = max(n for _, n in counts.values())
    out = {
        f"pass_hat_{j}": float(np.mean([math.comb(c, j) / math.comb(n, j) for c, n in counts.values() if n >= j]))
        for j in range(1, top + 1)
    }
    out["flaky_rate"] = float(np.mean([0 < c < n for c, n in counts.values()]))
    flips = [flip_rate(c, n) for c, n in counts.values() if n >= 2]
    out["flip_rate"] = float(np.mean(flips)) if flips else NAN
    return out


def _paired(records: Sequence[Record], a: str, b: str) -> tuple[list[float], list[float]]:
    pairs = [(_score(r, a), _score(r, b)) for r in records]
    kept = [(x, y) for x, y in pairs if x is not None and y is not None]
    return [x for x, _ in kept], [y for _, y in kept]


DECOMPOSITION = (
    ("delta_rewrite", "withheld", "orig"),
    ("delta_answers", "clarified", "withheld"),
    ("delta_oracle", "oracle", "orig"),
    ("gap_oracle", "oracle", "clarified"),
)
"""(metric, arm, baseline): the rewrite's own effect, the answers' information, the ceiling and what is left."""


def attribution_metrics(reduced: Sequence[Record], resampling: Resampling) -> dict[str, float]:
    """Scores of the attribution arms and the decomposition of the delta, with paired CIs.

    Args:
        reduced: One record per instance (:func:`instance_means`).
        resampling: Resamples, confidence level and seed of the paired bootstrap.

    Returns:
        ``arm_<name>_score_mean``, ``<delta>_mean`` / ``_ci_low`` / ``_ci_high`` per
        :data:`DECOMPOSITION` entry and per question (``marginal_q<i>``); empty without arms.
    """
    names = list(dict.fromkeys(n for r in reduced for n in r.arms))
    if not names:
        return {}
    reduced = sorted(reduced, key=lambda r: r.id)  # the same CIs whatever order the records finished in
    out: dict[str, float] = {}
    for n in names:
        scores = [s for s in (_score(r, n) for r in reduced) if s is not None]
        out[f"arm_{n}_score_mean"] = float(np.mean(scores)) if scores else NAN
    for metric, a, b in (*DECOMPOSITION, *marginal_steps(reduced)):
        if a in names or b in names:
            mean, low, high = paired_bootstrap_ci(*_paired(reduced, a, b), resampling)
            out.update({f"{metric}_mean": mean, f"{metric}_ci_low": low, f"{metric}_ci_high": high})
    return out


def marginal_steps(records: Sequence[Record]) -> list[tuple[str, str, str]]:
    """(metric, arm, baseline) per question: ``marginal_q<i>`` = prefix_i − prefix_{i−1} (orig, clarified at the ends)."""
    depth = max((int(n.rsplit("_", 1)[1]) for r in records for n in r.arms if n.startswith("prefix_")), default=0)
    if depth == 0:
        return []
    chain = ["orig", *(f"prefix_{i}" for i in range(1, depth + 1)), "clarified"]
    return [(f"marginal_q{i}", chain[i], chain[i - 1]) for i in range(1, len(chain))]
