"""Put every (q*, question) pair a person answered to a UA, and score the UA against the person.

The UA sees exactly what the protocol lets it see: the facet description (``q*``) and one
question. Answers are asked concurrently (``concurrency`` at once); a pair whose UA call fails
(after the LLM layer's retries and re-asks) is counted and left out, never scored as ``unknown``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cts.core.contracts import UserAnswerer
from cts.data.human_answers import HumanAnswerDataset
from cts.realism.metrics import Pair, audit_metrics
from cts.stats.agreement import Estimate
from cts.stats.bootstrap import Resampling

__all__ = ["AuditResult", "ReplayedUA", "answer_all", "dataset_pairs", "run_audit", "sample_pairs"]


class ReplayedUA:
    """The answers an earlier audit's UA gave (its ``pairs.jsonl``), reused without a call.

    Only a pair the file does not hold (its call failed then) goes to ``fallback``, the UA of this
    run: an audit resumed, or rescored under a changed rule. With a deterministic UA (temperature 0)
    whose output cap was raised, a recorded reply that ended before the old cap is what the new cap gives.
    """

    def __init__(self, path: Path, fallback: UserAnswerer) -> None:
        """Args:
        path: A ``pairs.jsonl`` written by an audit (``--replay``).
        fallback: The UA asked for the pairs the file does not hold.
        """
        self.fallback = fallback
        self.replayed = 0
        self.answers: dict[tuple[str, str], str] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            self.answers[(row["fused_query"], row["question"])] = row["ua"]

    async def answer(self, fused_query: str, question: str) -> str:
        """The recorded answer, else the fallback UA's."""
        recorded = self.answers.get((fused_query, question))
        if recorded is None:
            return await self.fallback.answer(fused_query, question)
        self.replayed += 1
        return recorded


def dataset_pairs(dataset: HumanAnswerDataset) -> list[Pair]:
    """Every answered (facet, question) pair, with the person's answer and no UA answer yet."""
    by_id = dataset.intent()
    pairs = []
    for a in dataset.answers:
        inst = by_id[a.instance_id]
        pairs.append(Pair(str(inst.meta.get("topic", inst.id)), inst.fused_query, a.question, a.answer, ""))
    return pairs


def sample_pairs(pairs: Sequence[Pair], n: int | None, seed: int) -> list[Pair]:
    """A seeded sample of ``n`` pairs in the dataset's order (all of them when ``n`` is None or too large)."""
    if n is None or n >= len(pairs):
        return list(pairs)
    keep = sorted(random.Random(seed).sample(range(len(pairs)), n))
    return [pairs[i] for i in keep]


async def answer_all(ua: UserAnswerer, pairs: Sequence[Pair], concurrency: int) -> list[str | BaseException]:
    """The UA's answer to each pair's question from its ``q*`` (an exception where the call failed)."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(p: Pair) -> str | BaseException:
        async with gate:
            try:
                return await ua.answer(p.fused_query, p.question)
            except Exception as e:  # noqa: BLE001 - one failed pair is counted, not fatal
                return e

    return list(await asyncio.gather(*(one(p) for p in pairs)))


@dataclass(frozen=True)
class AuditResult:
    """One UA against people: the scored pairs, the statistics, the failures and the wall time."""

    pairs: tuple[Pair, ...]
    metrics: dict[str, Estimate]
    failures: dict[str, int] = field(default_factory=dict)
    """Failed UA calls by exception type (left out of every statistic)."""
    seconds: float = 0.0


def run_audit(ua: UserAnswerer, pairs: Sequence[Pair], boot: Resampling, concurrency: int = 8) -> AuditResult:
    """Answer every pair with ``ua`` and compute :func:`cts.realism.metrics.audit_metrics` over the answered ones."""
    start = time.perf_counter()
    answers = asyncio.run(answer_all(ua, pairs, concurrency))
    seconds = time.perf_counter() - start
    scored = [
        Pair(p.cluster, p.fused_query, p.question, p.human, a) for p, a in zip(pairs, answers) if isinstance(a, str)
    ]
    failures = Counter(type(a).__name__ for a in answers if not isinstance(a, str))
    return AuditResult(tuple(scored), audit_metrics(scored, boot), dict(failures), seconds)
