"""Interaction diagnostics over records: question types, region bias, unknown rates.

Pure functions of the records (paper Tables 4, 5, 8, 10). Every question a
Clarifier asked counts for the type rates; a question counts for an unknown
rate only when the User Answerer answered it (an interaction that failed
mid-way has questions without answers). Undefined rates are NaN, never 0.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from cts.compat.records import question_types
from cts.core.records import Record
from cts.core.types import UNKNOWN
from cts.text.qtypes import QTYPES, classify_question, is_region_only

NAN = float("nan")


@dataclass(frozen=True)
class Turn:
    """One clarification turn of one record."""

    turn: int
    """1-based position of the question in the interaction."""
    types: tuple[str, ...]
    answer: str | None
    """The UA's answer, or None when the interaction stopped before it."""

    @property
    def unknown(self) -> bool | None:
        """Whether the answer is ``unknown`` (None when unanswered)."""
        return None if self.answer is None else self.answer == UNKNOWN


def turns(records: Sequence[Record]) -> Iterator[Turn]:
    """Every clarification turn of ``records``.

    Questions of records of older versions are typed as :func:`cts.compat.records.question_types` says.
    """
    for r in records:
        typed = question_types(r.questions, r.question_types, classify_question)
        for i, types in enumerate(typed):
            answer = r.answers[i] if i < len(r.answers) else None
            yield Turn(i + 1, tuple(types), answer)


def _rate(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else NAN


def _unknown_rate(selected: Sequence[Turn]) -> float:
    return _rate([t.unknown for t in selected if t.unknown is not None])


def type_metrics(all_turns: Sequence[Turn]) -> dict[str, float]:
    """Share of questions per type and the UA unknown rate per type."""
    out: dict[str, float] = {"cq_region_rate": _rate([("region" in t.types) for t in all_turns])}
    for qtype in QTYPES:
        of_type = [t for t in all_turns if qtype in t.types]
        out[f"qtype_rate_{qtype}"] = _rate([qtype in t.types for t in all_turns])
        out[f"unknown_rate_{qtype}"] = _unknown_rate(of_type)
    return out


def region_only_metrics(all_turns: Sequence[Turn], k: int) -> dict[str, float]:
    """Region-only counts and unknown rates, overall and per turn ``t1..tk`` (Table 10)."""
    region_only = [t for t in all_turns if is_region_only(t.types)]
    out = {
        "region_only_count": float(len(region_only)),
        "region_only_rate": _rate([is_region_only(t.types) for t in all_turns]),
        "region_only_unknown_rate": _unknown_rate(region_only),
    }
    for i in range(1, k + 1):
        at_turn = [t for t in region_only if t.turn == i]
        out[f"region_only_count_t{i}"] = float(len(at_turn))
        out[f"region_only_unknown_rate_t{i}"] = _unknown_rate(at_turn)
    return out


def diagnostics(records: Sequence[Record]) -> dict[str, float]:
    """Question-type and region-only diagnostics of one job.

    Args:
        records: The job's records (any mix of finished and failed instances).

    Returns:
        ``cq_region_rate`` (share of questions whose types include region),
        ``qtype_rate_<type>`` and ``unknown_rate_<type>`` for every type,
        ``region_only_count``, ``region_only_rate``, ``region_only_unknown_rate``,
        and ``region_only_count_t<i>`` / ``region_only_unknown_rate_t<i>`` for
        turns ``i = 1..k`` (k = the largest budget or question count seen).
        Rates with an empty denominator are NaN.
    """
    all_turns = list(turns(records))
    k = max([r.k for r in records] + [t.turn for t in all_turns] + [0])
    return {**type_metrics(all_turns), **region_only_metrics(all_turns, k)}
