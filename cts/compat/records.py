"""Records (``records.jsonl`` lines) of older versions, read in today's form.

:func:`upgrade_record` renames what a line of an older version names differently (the clarified
arm stored as ``system``, the search end reasons ``call_budget`` / ``context_budget``);
:func:`infra_as_written_before` recognises the infrastructure failures older versions committed
as results, so that a resume runs those instances again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard

from cts.core.types import INFRA_CALL_KINDS, INFRA_EXCEPTION_NAMES

OLD_END_REASONS: Mapping[str, str] = {"call_budget": "call_limit", "context_budget": "context_limit"}
"""Search end reasons as older versions wrote them -> today's."""

OLD_CLARIFIED_KEY = "system"
"""The key of the clarified arm in records written before the arm was renamed."""

OLD_SEARCH_ERROR = "search ended in error"
"""What older versions wrote when a deep-search run ended on a failed call mid-episode."""


def end_reason(reason: Any) -> Any:
    """A search end reason in today's names (older records say ``call_budget``, ``context_budget``)."""
    return OLD_END_REASONS.get(reason, reason) if isinstance(reason, str) else reason


def upgrade_record(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """A record line (after ``json.loads``) in today's form: ``d`` itself when it already is (the common case, kept cheap)."""
    named = d.get("arms") or {}
    if (
        OLD_CLARIFIED_KEY not in d
        and not _old_arm(d.get("clarified"))
        and not _old_arm(d.get("orig"))
        and not any(_old_arm(arm) for arm in named.values())
    ):
        return d
    out = {k: v for k, v in d.items() if k != OLD_CLARIFIED_KEY}
    out["clarified"] = _upgraded_arm(d["clarified"] if "clarified" in d else d.get(OLD_CLARIFIED_KEY))
    out["orig"] = _upgraded_arm(d.get("orig"))
    if named:
        out["arms"] = {name: _upgraded_arm(arm) for name, arm in named.items()}
    return out


def _old(reason: Any) -> bool:
    return isinstance(reason, str) and reason in OLD_END_REASONS


def _mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, dict) or isinstance(value, Mapping)  # dict first: json's, and cheaper than the ABC


def _summary_end(arm: Mapping[str, Any]) -> Any:
    summary = arm.get("trace_summary")
    return summary.get("end_reason") if _mapping(summary) else None


def _old_arm(arm: Any) -> bool:
    """Whether an arm's mapping names an end reason the way older versions did."""
    return arm is not None and _mapping(arm) and (_old(arm.get("end_reason")) or _old(_summary_end(arm)))


def _upgraded_arm(arm: Any) -> Any:
    """An arm's mapping with today's end reasons (``arm`` itself when it has no old one)."""
    if not _old_arm(arm):
        return arm
    out = dict(arm)
    out["end_reason"] = end_reason(arm.get("end_reason", ""))
    if _old(_summary_end(arm)):
        out["trace_summary"] = {**arm["trace_summary"], "end_reason": end_reason(_summary_end(arm))}
    return out


def infra_as_written_before(kind: str, message: str) -> bool:
    """Whether an error of ``kind`` and ``message`` is an infrastructure failure as older versions wrote one.

    Older versions wrote every failed call as ``api_error`` with the message ``"<call kind>: ..."``
    (or :data:`OLD_SEARCH_ERROR`), and cache errors as ``exception`` with ``"<class>: ..."``.
    """
    head = message.split(":", 1)[0].strip()
    if kind == "api_error":
        return head in INFRA_CALL_KINDS or message == OLD_SEARCH_ERROR
    return kind == "exception" and head in INFRA_EXCEPTION_NAMES


def question_types(
    questions: Sequence[str], stored: Sequence[Sequence[str]], classify: Callable[[str], Sequence[str]]
) -> list[Sequence[str]]:
    """Each question's types: as stored, or by ``classify`` (the lexicon typer) for those a record of an
    older version stored without (records written before typing existed)."""
    return [stored[i] if i < len(stored) else classify(q) for i, q in enumerate(questions)]
