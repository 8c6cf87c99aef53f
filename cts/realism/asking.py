"""Ask-or-not against people: a gate's choices against ClariQ's ``clarification_need``.

Each request (a topic's ``initial_request``; a second wording of it is its own request, in the same
topic) was rated by people from 1 (no clarification needed) to 4 (necessary). A request *needs*
clarification when its rating is at least ``need_threshold`` (3). A gate sees the request only
and says ask / don't ask with a confidence; its **score** is the confidence of asking
(``confidence`` when it asks, ``1 - confidence`` when it does not). Reported: the AUC of the score
against need (ties count one half; 0.5 for a constant score), the accuracy of its decisions, the
ask rate, each with a cluster bootstrap interval over topics.

The outcome gate (``gate=oracle``) reads finished records of a sweep, which a dataset of people's
ratings does not have: here it is the reference that asks exactly where people said so (AUC 1).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from cts.data.human_answers import HumanAnswerDataset
from cts.realism.metrics import mean_estimate
from cts.roles.gates import gate_kind
from cts.stats.agreement import Estimate, cluster_draws, percentile_interval
from cts.stats.bootstrap import Resampling
from cts.stats.cluster import cluster_codes

__all__ = ["Request", "Scored", "auc", "auc_estimate", "gate_metrics", "requests_of", "score_requests"]

NAN = float("nan")


@dataclass(frozen=True)
class Request:
    """One request people rated."""

    topic: str
    blurred_query: str
    need: int


@dataclass(frozen=True)
class Scored:
    """A gate's decision on one request."""

    request: Request
    ask: bool
    score: float


def requests_of(dataset: HumanAnswerDataset) -> list[Request]:
    """The dataset's distinct rated requests (instances without a ``clarification_need`` are skipped)."""
    seen: dict[tuple[str, str], Request] = {}
    for inst in dataset.instances:
        need = inst.meta.get("clarification_need")
        if isinstance(need, int):
            key = (str(inst.meta.get("topic", inst.id)), inst.blurred_query)
            seen.setdefault(key, Request(key[0], inst.blurred_query, need))
    return list(seen.values())


async def _decide(gate: object, requests: Sequence[Request], threshold: int) -> list[Scored]:
    if gate_kind(gate) == "outcome":  # the reference: people's own rating
        return [Scored(r, r.need >= threshold, float(r.need)) for r in requests]
    out = []
    for r in requests:
        d = await gate.decide(r.blurred_query)  # type: ignore[attr-defined]  # a query gate (gate_kind)
        out.append(Scored(r, bool(d.ask), float(d.confidence if d.ask else 1.0 - d.confidence)))
    return out


def score_requests(gate: object, requests: Sequence[Request], threshold: int = 3) -> list[Scored]:
    """The gate's decision and score on every request, one after another (a gate's calls are few)."""
    return asyncio.run(_decide(gate, requests, threshold))


def _weighted_auc(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUC for each row of ``weights`` (units drawn that many times): P(pos > neg) + P(tie) / 2."""
    diff = np.sign(scores[:, None] - scores[None, :])
    wins = (diff + 1.0) / 2.0  # 1 greater, 0.5 tie, 0 smaller
    pos, neg = weights * labels, weights * (1.0 - labels)
    num = np.einsum("bi,ij,bj->b", pos, wins, neg)
    den = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, NAN)


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve of ``scores`` for ``labels`` (NaN without both classes)."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=float)
    return float(_weighted_auc(s, y, np.ones((1, s.size)))[0])


def auc_estimate(
    scores: Sequence[float], labels: Sequence[bool], clusters: Sequence[Hashable], boot: Resampling
) -> Estimate:
    """The AUC with a cluster bootstrap interval (whole topics resampled)."""
    if not len(scores):
        return Estimate(NAN, NAN, NAN, 0, 0)
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=float)
    codes = cluster_codes(clusters)
    n_clusters = int(codes.max()) + 1
    dist = []
    for drawn in cluster_draws(n_clusters, boot.n_resamples, boot.seed):
        counts = np.stack([np.bincount(row, minlength=n_clusters) for row in drawn])
        dist.append(_weighted_auc(s, y, counts[:, codes].astype(float)))
    return Estimate(
        auc(scores, labels), *percentile_interval(np.concatenate(dist), boot.confidence), len(s), n_clusters
    )


def gate_metrics(scored: Sequence[Scored], boot: Resampling, threshold: int = 3) -> dict[str, Estimate]:
    """AUC, accuracy, ask rate and the share of requests that need clarification, with their intervals."""
    clusters = [s.request.topic for s in scored]
    needs = [s.request.need >= threshold for s in scored]
    return {
        "auc": auc_estimate([s.score for s in scored], needs, clusters, boot),
        "accuracy": mean_estimate([float(s.ask == n) for s, n in zip(scored, needs)], clusters, boot),
        "ask_rate": mean_estimate([float(s.ask) for s in scored], clusters, boot),
        "need_rate": mean_estimate([float(n) for n in needs], clusters, boot),
    }
