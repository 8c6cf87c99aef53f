"""How human is a simulated user: pure functions over (person's answer, UA's answer) pairs.

Every statistic comes with a cluster bootstrap percentile interval over topics (the facets of one
topic, the questions of one facet are not independent): :func:`cts.stats.cluster.cluster_bootstrap_ci`
for shares and means, the same index stream for kappa (:func:`cts.stats.agreement.cluster_draws`).

- **answerability**: Cohen's kappa between "the person gave an informative answer" and "the UA did"
  (:func:`cts.realism.answers.is_informative`, the same rule for both), and their 2x2 confusion matrix;
- **content**: token F1 over content tokens (CJK bigrams) on the pairs where both answered;
- **cooperativeness gap**: the share of pairs the UA answers and the person did not (``over_answer``),
  and the reverse (``under_answer``);
- **style**: content tokens per informative answer, and the leak rate (the share of informative answers
  with a content token in neither ``q*`` nor the question), for the UA and for people.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cts.realism.answers import content_f1, is_informative, leaked_tokens
from cts.stats.agreement import Estimate, cluster_draws, confusion_counts, kappa_from_counts, percentile_interval
from cts.stats.bootstrap import Resampling
from cts.stats.cluster import cluster_bootstrap_ci, cluster_codes
from cts.text.tokens import content_tokens

__all__ = [
    "Pair",
    "PairScores",
    "audit_metrics",
    "confusion",
    "human_distance",
    "kappa_estimate",
    "mean_estimate",
    "score_pair",
]

NAN = float("nan")


@dataclass(frozen=True)
class Pair:
    """One question about one facet, the person's answer and the UA's."""

    cluster: str
    """The topic (the bootstrap's unit)."""
    fused_query: str
    question: str
    human: str
    ua: str


@dataclass(frozen=True)
class PairScores:
    """What one pair contributes to each statistic."""

    human_informative: bool
    ua_informative: bool
    f1: float | None
    """None unless both answered."""
    human_tokens: int
    ua_tokens: int
    human_leaks: bool
    ua_leaks: bool


def score_pair(p: Pair) -> PairScores:
    """The per-pair values of every statistic."""
    h, u = is_informative(p.human, p.question), is_informative(p.ua, p.question)
    return PairScores(
        human_informative=h,
        ua_informative=u,
        f1=content_f1(p.ua, p.human) if h and u else None,
        human_tokens=len(content_tokens(p.human)),
        ua_tokens=len(content_tokens(p.ua)),
        human_leaks=bool(leaked_tokens(p.human, p.fused_query, p.question)),
        ua_leaks=bool(leaked_tokens(p.ua, p.fused_query, p.question)),
    )


def mean_estimate(values: Sequence[float], clusters: Sequence[Hashable], boot: Resampling) -> Estimate:
    """The mean of ``values`` with its cluster bootstrap interval (NaN over no value)."""
    if not len(values):
        return Estimate(NAN, NAN, NAN, 0, 0)
    ci = cluster_bootstrap_ci(values, [0.0] * len(values), clusters, boot)
    return Estimate(ci.mean, ci.low, ci.high, len(values), ci.n_clusters)


def confusion(human: Sequence[bool], ua: Sequence[bool]) -> np.ndarray:
    """2x2 counts: rows the person (0 no answer, 1 informative), columns the UA."""
    return confusion_counts([int(x) for x in human], [int(x) for x in ua], 2)


def kappa_estimate(
    human: Sequence[bool], ua: Sequence[bool], clusters: Sequence[Hashable], boot: Resampling
) -> Estimate:
    """Cohen's kappa of the two answered/not codes, with a cluster bootstrap interval (NaN where undefined)."""
    if not len(human):
        return Estimate(NAN, NAN, NAN, 0, 0)
    value = float(kappa_from_counts(confusion(human, ua)))
    codes = cluster_codes(clusters)
    n_clusters = int(codes.max()) + 1
    per_cluster = np.zeros((n_clusters, 4))
    np.add.at(per_cluster, (codes, np.asarray(human, dtype=int) * 2 + np.asarray(ua, dtype=int)), 1.0)
    dist = np.concatenate(
        [
            kappa_from_counts(per_cluster[drawn].sum(axis=1).reshape(-1, 2, 2))
            for drawn in cluster_draws(n_clusters, boot.n_resamples, boot.seed)
        ]
    )
    return Estimate(value, *percentile_interval(dist, boot.confidence), len(human), n_clusters)


def audit_metrics(pairs: Sequence[Pair], boot: Resampling) -> dict[str, Estimate]:
    """Every statistic of the module docstring over ``pairs``, by name."""
    scores = [score_pair(p) for p in pairs]
    cl = [p.cluster for p in pairs]
    h = [s.human_informative for s in scores]
    u = [s.ua_informative for s in scores]
    both = [(s, c) for s, c in zip(scores, cl) if s.f1 is not None]
    h_ans = [(s, c) for s, c in zip(scores, cl) if s.human_informative]
    u_ans = [(s, c) for s, c in zip(scores, cl) if s.ua_informative]
    return {
        "kappa": kappa_estimate(h, u, cl, boot),
        "human_answer_rate": mean_estimate([float(x) for x in h], cl, boot),
        "ua_answer_rate": mean_estimate([float(x) for x in u], cl, boot),
        "agreement": mean_estimate([float(a == b) for a, b in zip(h, u)], cl, boot),
        "over_answer": mean_estimate([float(b and not a) for a, b in zip(h, u)], cl, boot),
        "under_answer": mean_estimate([float(a and not b) for a, b in zip(h, u)], cl, boot),
        "content_f1": _over(both, lambda s: float(s.f1 or 0.0), boot),
        "human_tokens": _over(h_ans, lambda s: float(s.human_tokens), boot),
        "ua_tokens": _over(u_ans, lambda s: float(s.ua_tokens), boot),
        "human_leak_rate": _over(h_ans, lambda s: float(s.human_leaks), boot),
        "ua_leak_rate": _over(u_ans, lambda s: float(s.ua_leaks), boot),
    }


def _over(rows: Sequence[tuple[PairScores, str]], get: Callable[[PairScores], float], boot: Resampling) -> Estimate:
    return mean_estimate([get(s) for s, _ in rows], [c for _, c in rows], boot)


def human_distance(metrics: Mapping[str, Estimate]) -> float:
    """How far a UA's answering profile is from people's (0 = the same; at most 1): the nearest persona's measure.

    The mean of three gaps, each in [0, 1]: answer rates (UA vs people), leak rates, and answer
    lengths (``|a - b| / max(a, b)``). A UA that never answers has no length or leak: those gaps are
    1 and people's leak rate.
    """
    m = {k: v.value for k, v in metrics.items()}
    rate = abs(m["ua_answer_rate"] - m["human_answer_rate"])
    ua_leak = 0.0 if np.isnan(m["ua_leak_rate"]) else m["ua_leak_rate"]
    leak = abs(ua_leak - m["human_leak_rate"])
    a, b = m["ua_tokens"], m["human_tokens"]
    length = 1.0 if np.isnan(a) or np.isnan(b) or max(a, b) == 0 else abs(a - b) / max(a, b)
    return float((rate + leak + length) / 3.0)
