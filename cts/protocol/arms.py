"""Attribution arms: the ceiling, the rewrite without information, and the value of each further question.

- ``oracle`` searches the hidden intent ``fused_query`` itself and judges the answer: the
  ceiling of restoration. It is the only search that ever sees ``fused_query``.
- ``withheld`` gives the rewriter the same questions with every answer ``unknown``: what
  asking (and rewriting) without information does. Then
  Δ(clarified − orig) = Δ(withheld − orig) [the rewrite's own effect] + Δ(clarified − withheld)
  [the answers' information], exactly, instance by instance.
- ``prefix`` (k > 1): the rewrite with answers 1..i (i < k) searched and judged, as arm
  ``prefix_<i>``; question i's marginal value is score(prefix_i) − score(prefix_{i−1}), with
  prefix_0 = orig and prefix_k = clarified.

The rewriter is called through :class:`~cts.core.contracts.Rewriter` with ``blurred_query``
and pairs only: it never sees the intent. Every arm's search and judge go through the
caller's ``search`` (shared across a sweep's jobs and cached, as the orig arm is).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from cts.core.contracts import Rewriter
from cts.core.records import ArmResult
from cts.core.types import QA, UNKNOWN
from cts.protocol.stages import StageError, stage

ArmOutcome = tuple[ArmResult, dict[str, Any]]
SearchArm = Callable[[str, str], Awaitable[ArmOutcome]]
"""``search(arm, query)``: the query searched and judged as arm ``arm`` (shared, cached)."""


async def oracle_arm(fused_query: str, search: SearchArm) -> ArmOutcome:
    """The ceiling: the intent itself searched and judged."""
    return await search("oracle", fused_query)


async def withheld_query(blurred_query: str, questions: Sequence[str], rewriter: Rewriter) -> str:
    """The rewrite of the same questions, every answer ``unknown``."""
    with stage("rewrite"):
        return await rewriter.rewrite(blurred_query, [QA(c, UNKNOWN) for c in questions])


async def prefix_query(blurred_query: str, qa: Sequence[QA], i: int, rewriter: Rewriter) -> str:
    """The rewrite with the first ``i`` pairs only."""
    with stage("rewrite"):
        return await rewriter.rewrite(blurred_query, list(qa[:i]))


async def _rewritten(arm: str, rewrite: Awaitable[str], search: SearchArm) -> ArmOutcome:
    try:
        query = await rewrite
    except StageError as e:  # unscored, with why (a failed rewrite is not a bad answer)
        return ArmResult(query="", error=e.info), {}
    return await search(arm, query)


def rewrite_arms(arms: Sequence[str], qa: Sequence[QA]) -> list[str]:
    """The names of the rewritten arms a job with ``arms`` runs for an interaction of ``qa``."""
    names = ["withheld"] if "withheld" in arms and qa else []
    return names + ([f"prefix_{i}" for i in range(1, len(qa))] if "prefix" in arms else [])


async def run_rewrite_arms(
    arms: Sequence[str], blurred_query: str, qa: Sequence[QA], rewriter: Rewriter, search: SearchArm
) -> Mapping[str, ArmOutcome]:
    """The ``withheld`` and ``prefix_<i>`` arms of one finished interaction, concurrently.

    Args:
        arms: The job's arms (``oracle`` is run by the caller: it needs no interaction).
        blurred_query: ``q``, all the rewriter may see besides the pairs.
        qa: The interaction's pairs.
        rewriter: The job's rewriter.
        search: Searches and judges one arm's query.
    """
    work: dict[str, Awaitable[ArmOutcome]] = {}
    for name in rewrite_arms(arms, qa):
        if name == "withheld":
            query = withheld_query(blurred_query, [p.question for p in qa], rewriter)
        else:
            query = prefix_query(blurred_query, qa, int(name.rsplit("_", 1)[1]), rewriter)
        work[name] = _rewritten(name, query, search)
    done = await asyncio.gather(*work.values())
    return dict(zip(work, done))
