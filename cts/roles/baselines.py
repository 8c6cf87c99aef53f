"""Extra offline baselines (no LLM) for the robustness analyses: a stricter UA and two rewriters.

They are named baselines, never stand-ins for a model: the bracket rewriter is a second
honest rewriter; the concretising rewriter breaks the protocol on purpose (a negative
control for the unsupported-concretisation metric).
"""

from __future__ import annotations

from collections.abc import Sequence

from cts.core.types import QA, UNKNOWN
from cts.text.lexicon import PlaceLexicon
from cts.text.qtypes import classify_question


class TypeRestrictedUserAnswerer:
    """Baseline UA (no LLM): the rule UA, but ``unknown`` for questions outside ``types``.

    A second, stricter offline "backbone" for backbone-stability runs; it is a
    named baseline, never a stand-in for a model.
    """

    def __init__(self, places: PlaceLexicon, types: Sequence[str] = ("time", "region")) -> None:
        from cts.roles.rules import RuleUserAnswerer

        self.inner = RuleUserAnswerer(places)
        self.types = frozenset(types)

    async def answer(self, fused_query: str, question: str) -> str:
        """Answer like the rule UA when the question asks about one of ``types``."""
        if not self.types & set(classify_question(question)):
            return UNKNOWN
        return await self.inner.answer(fused_query, question)


class BracketRewriterBaseline:
    """Baseline Rewriter (no LLM): ``q (a1; a2)`` with the known answers; unknowns add nothing."""

    def __init__(self, sep: str = "; ") -> None:
        self.sep = sep

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str:
        """Append the known answers in brackets."""
        known = [p.answer.strip() for p in qa if not p.is_unknown and p.answer.strip()]
        return f"{blurred_query.strip()} ({self.sep.join(known)})" if known else blurred_query.strip()


class ConcretisingRewriterBaseline:
    """Negative-control Rewriter (no LLM): fills every ``unknown`` with a fixed value.

    It breaks the protocol on purpose (a time question answered ``unknown`` gets
    ``year``, a region question gets ``place``), so that a stability run shows
    what unsupported concretisation looks like in the metrics.
    """

    def __init__(self, year: str = "2024", place: str = "United States") -> None:
        self.fill = {"time": year, "region": place}

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str:
        """Append known answers and invented values for the unknown ones."""
        parts = [p.answer for p in qa if not p.is_unknown]
        for p in qa:
            if p.is_unknown:
                parts += [self.fill[t] for t in classify_question(p.question) if t in self.fill]
        return ", ".join([blurred_query.strip(), *parts]) if parts else blurred_query.strip()
