"""The paper's headline pattern on real intents: are region questions answered ``unknown`` more often, and
does the all-unknown rate fall with the budget k?

A clarifier asks k questions about each facet's request q (batch mode, k = 1, 2, 3); a UA answers
each from the facet description q*; a question typer labels each question. Per k: the UA's unknown
rate, the share of region-only questions, their unknown rate against the other questions', and the
share of facets whose k answers are all ``unknown`` (the paper's Tables 4, 5 and 7); and the two
unknown rates over the turns of every k (``*_all_k``: a rule clarifier asks one type at k=1). The same
statistics of people's own answers to the dataset's own questions (a "not informative" answer
counted as unknown: :func:`cts.realism.answers.is_informative`) and the paper's ranges over its
seven clarifiers sit beside them. Nothing is tuned to match.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cts.core.contracts import Clarifier, QuestionTyper, UserAnswerer
from cts.core.types import UNKNOWN, Instance
from cts.data.human_answers import HumanAnswerDataset
from cts.realism.answers import is_informative
from cts.text.qtypes import is_region_only

__all__ = ["PAPER", "Turn", "human_turns", "pattern_row", "run_turns"]

NAN = float("nan")

PAPER: Mapping[str, str] = {
    "ua_unknown_rate": "0.600–0.701",
    "cq_region_rate": "0.143–0.498",
    "region_only_unknown": "0.750–0.869",
    "all_unknown_k1": "0.600–0.701",
    "all_unknown_k2": "0.375–0.523",
    "all_unknown_k3": "0.189–0.421",
}
"""The paper's ranges over its seven clarifiers (n=518, ERNIE UA): Tables 4 and 5 (k=1) and 7 (all_unknown by k)."""


@dataclass(frozen=True)
class Turn:
    """One question of one interaction and whether its answer was unknown."""

    k: int
    instance_id: str
    question: str
    region_only: bool
    unknown: bool
    failed: bool = False
    """The UA's call failed: the turn is left out of every rate."""


async def _interaction(
    clarifier: Clarifier,
    ua: UserAnswerer,
    typer: QuestionTyper,
    inst: Instance,
    k: int,
    asked: dict[tuple[str, int], list[str]],
) -> list[Turn]:
    key = (inst.blurred_query, k)  # a clarifier sees q only: the facets of one request share its questions
    if key not in asked:
        try:
            asked[key] = await clarifier.ask(inst.blurred_query, k)
        except Exception:  # noqa: BLE001 - a failed clarifier call leaves this request out (counted in the row)
            asked[key] = []
    questions = asked[key]
    turns = []
    for q in questions:
        types = await typer.classify(q)
        try:
            answer: str | None = await ua.answer(inst.fused_query, q)
        except Exception:  # noqa: BLE001 - a failed UA call: the turn is counted as failed, not as unknown
            answer = None
        turns.append(Turn(k, inst.id, q, is_region_only(types), answer == UNKNOWN, failed=answer is None))
    return turns


async def _all(
    clarifier: Clarifier, ua: UserAnswerer, typer: QuestionTyper, instances: Sequence[Instance], ks: Sequence[int]
) -> list[Turn]:
    out: list[Turn] = []
    asked: dict[tuple[str, int], list[str]] = {}
    for k in ks:
        for inst in instances:
            out += await _interaction(clarifier, ua, typer, inst, k, asked)
    return out


def run_turns(
    clarifier: Clarifier,
    ua: UserAnswerer,
    typer: QuestionTyper,
    instances: Sequence[Instance],
    ks: Sequence[int] = (1, 2, 3),
) -> list[Turn]:
    """Every interaction of every budget in ``ks``, one after another (an LLM clarifier's calls are few)."""
    return asyncio.run(_all(clarifier, ua, typer, instances, ks))


def human_turns(dataset: HumanAnswerDataset, typer: QuestionTyper) -> list[Turn]:
    """People's answers to the dataset's own questions as turns (k=1 each; not informative = unknown)."""

    async def typed() -> list[Turn]:
        return [
            Turn(
                1,
                f"{a.instance_id}/{a.question_id}",
                a.question,
                is_region_only(await typer.classify(a.question)),
                not is_informative(a.answer, a.question),
            )
            for a in dataset.answers
        ]

    return asyncio.run(typed())


def _rate(flags: Sequence[bool]) -> float:
    return float(np.mean(flags)) if len(flags) else NAN


def pattern_row(turns: Sequence[Turn]) -> dict[str, float]:
    """The statistics of the module docstring: k=1 rates, and ``all_unknown_k<k>`` for every k present."""
    failed = sum(t.failed for t in turns)
    turns = [t for t in turns if not t.failed]
    first = [t for t in turns if t.k == 1]
    region = [t.unknown for t in first if t.region_only]
    row = {
        "n_facets": float(len({t.instance_id for t in turns})),
        "n_questions_k1": float(len(first)),
        "failed_turns": float(failed),
        "ua_unknown_rate": _rate([t.unknown for t in first]),
        "cq_region_rate": _rate([t.region_only for t in first]),
        "n_region_only": float(len(region)),
        "region_only_unknown": _rate(region),
        "other_unknown": _rate([t.unknown for t in first if not t.region_only]),
        "region_only_unknown_all_k": _rate([t.unknown for t in turns if t.region_only]),
        "other_unknown_all_k": _rate([t.unknown for t in turns if not t.region_only]),
    }
    for k in sorted({t.k for t in turns}):
        by_inst: dict[str, list[bool]] = {}
        for t in turns:
            if t.k == k:
                by_inst.setdefault(t.instance_id, []).append(t.unknown)
        row[f"all_unknown_k{k}"] = _rate([all(v) for v in by_inst.values()])
    return row
