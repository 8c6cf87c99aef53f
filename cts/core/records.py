"""Per-instance records: frozen dataclasses serialised one JSON line each."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cts.compat.records import infra_as_written_before, upgrade_record
from cts.core.types import (
    INFRA_EXCEPTION_NAMES,
    CallError,
    CircuitOpen,
    ErrorKind,
    Label,
    SearchResult,
    SpendLimitReached,
)


def infra_exception(exc: BaseException) -> bool:
    """Whether an unexpected exception is the machine's fault (e.g. ``sqlite3.DatabaseError``, a full disk)."""
    return any(cls.__name__ in INFRA_EXCEPTION_NAMES for cls in type(exc).__mro__)


def infra_stop(exc: BaseException) -> bool:
    """Whether a failure on one item must stop a whole task rather than exclude the item.

    True for what cts treats as infrastructure, never as a result: the spending cap
    (:class:`~cts.core.types.SpendLimitReached`), an open circuit breaker
    (:class:`~cts.core.types.CircuitOpen`), a call failure of an infrastructure kind
    (:data:`~cts.core.types.INFRA_CALL_KINDS`: connection, timeout, 5xx or 429 after the
    retries, auth, model not found, cache) and cache or disk errors. Not a missing or
    existing file the user named (``FileNotFoundError``, ``FileExistsError``): that is bad
    input, reported as such (:mod:`cts.compose.errors`).
    """
    if isinstance(exc, (SpendLimitReached, CircuitOpen)):
        return True
    if isinstance(exc, CallError):
        return exc.infra
    return not isinstance(exc, (FileNotFoundError, FileExistsError)) and infra_exception(exc)


def search_call_error(result: SearchResult) -> CallError:
    """The call failure that ended a search run (``end_reason == "error"``).

    Read from ``result.failure``; a result without one (a backend that only wrote its trace)
    falls back to the trace's last error event.
    """
    if result.failure is not None:
        f = result.failure
        return CallError(f.kind, f.message, f.endpoint)
    event: Mapping[str, Any] = next((e for e in reversed(result.trace) if e.get("type") == "error"), {})
    return CallError(
        str(event.get("kind") or "error"), str(event.get("message") or "search ended in error"), event.get("endpoint")
    )


@dataclass(frozen=True)
class ErrorInfo:
    """Why an instance (or one arm of it) has no score."""

    stage: str
    """Pipeline stage: clarify, answer, rewrite, search, judge."""
    kind: ErrorKind
    """See :data:`cts.core.types.ErrorKind`: ``infra`` is never committed to ``records.jsonl``."""
    message: str
    endpoint: str | None = None
    """The endpoint (api_base or provider) of an ``infra`` failure, when known."""

    @property
    def infra(self) -> bool:
        """Whether this is an infrastructure failure (also as written by older versions: :mod:`cts.compat.records`)."""
        return self.kind == "infra" or infra_as_written_before(self.kind, self.message)


@dataclass(frozen=True)
class ArmResult:
    """Search + judgement of one query (the clarified arm or the orig arm)."""

    query: str
    answer: str = ""
    answer_rule: str = ""
    end_reason: str = ""
    trace_summary: Mapping[str, Any] = field(default_factory=dict)
    labels: Mapping[str, Label] = field(default_factory=dict)
    score: float | None = None
    """restore_score_100, or None when unscored (never 0 by default)."""
    error: ErrorInfo | None = None
    judge_members: Mapping[str, Mapping[str, Label]] = field(default_factory=dict)
    """A judge panel's members' labels (member -> nugget id -> label); left out of the JSON when none."""


@dataclass(frozen=True)
class Record:
    """Everything one job produced for one instance."""

    id: str
    k: int
    questions: tuple[str, ...] = ()
    question_types: tuple[tuple[str, ...], ...] = ()
    answers: tuple[str, ...] = ()
    rewritten_query: str | None = None
    clarified: ArmResult | None = None
    """The clarified arm: the rewritten query ``q^`` searched and judged (JSON key ``clarified``)."""
    orig: ArmResult | None = None
    """The orig arm: the underspecified query ``q`` searched and judged."""
    error: ErrorInfo | None = None
    usage: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Per role: calls, cache_hits, tokens_in, tokens_out, cost_usd, latency_s."""
    models: Mapping[str, str] = field(default_factory=dict)
    """Per role: the model id (or baseline name) that played it."""
    elapsed_s: float = 0.0
    mode: str = "batch"
    """How the questions were asked: ``batch`` (k at once) or ``sequential`` (turns in order)."""
    repeat: int = 0
    """Which run of the instance this is (``repeats``; JSON key left out at 0, as before repeats)."""
    arms: Mapping[str, ArmResult] = field(default_factory=dict)
    """Attribution arms by name (``oracle``, ``withheld``, ``prefix_<i>``; left out when none ran)."""
    resampled: tuple[str, ...] = ()
    """The stages this job's repeats re-sample when not all of them (variance by stage; left out when all)."""

    @property
    def infra_error(self) -> ErrorInfo | None:
        """The first infrastructure failure of the instance or its arms (None for a result)."""
        arms = (self.clarified, self.orig, *self.arms.values())
        found = (e for e in (self.error, *map(_arm_error, arms)) if e is not None)
        return next((e for e in found if e.infra), None)

    @property
    def score(self) -> float | None:
        """The clarified arm's restore_score_100 (None if unscored)."""
        return self.clarified.score if self.clarified else None

    @property
    def orig_score(self) -> float | None:
        """The orig arm's restore_score_100 (None if unscored)."""
        return self.orig.score if self.orig else None

    def to_json(self) -> str:
        """One JSON line (no trailing newline); the repeat and design fields only when they are set."""
        return json.dumps(self.to_plain(), ensure_ascii=False, sort_keys=True)

    def to_plain(self) -> dict[str, Any]:
        """What :meth:`to_json` writes, as plain dicts and lists."""
        d = _plain(self)
        for key, unset in _OPTIONAL.items():
            if d[key] == unset:
                del d[key]
        for arm in (d.get("clarified"), d.get("orig"), *(d.get("arms") or {}).values()):
            if arm is not None and not arm.get("judge_members"):
                del arm["judge_members"]  # a single judge's arm reads as before panels
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Record:
        """Inverse of :meth:`to_json` after ``json.loads``; a line of an older version is upgraded first (:mod:`cts.compat.records`)."""
        d = upgrade_record(d)
        return cls(
            id=d["id"],
            k=int(d["k"]),
            questions=tuple(d.get("questions") or ()),
            question_types=tuple(tuple(t) for t in d.get("question_types") or ()),
            answers=tuple(d.get("answers") or ()),
            rewritten_query=d.get("rewritten_query"),
            clarified=_arm(d.get("clarified")),
            orig=_arm(d.get("orig")),
            error=_err(d.get("error")),
            usage=d.get("usage") or {},
            models=d.get("models") or {},
            elapsed_s=float(d.get("elapsed_s") or 0.0),
            mode=str(d.get("mode") or "batch"),
            repeat=int(d.get("repeat") or 0),
            arms={n: a for n, v in (d.get("arms") or {}).items() if (a := _arm(v)) is not None},
            resampled=tuple(d.get("resampled") or ()),
        )


def _plain(obj: Any) -> Any:
    """``dataclasses.asdict`` for a record's values, without its deep copy of every leaf.

    A record's leaves are immutable (str, numbers, None), so they are shared, not
    copied; containers are rebuilt with their own type, as ``asdict`` does, so the
    JSON line is the same. ``asdict`` costs most of writing a record otherwise.
    """
    if isinstance(obj, (str, int, float)) or obj is None:
        return obj
    names = _FIELDS.get(type(obj))
    if names is None and hasattr(type(obj), "__dataclass_fields__"):
        names = _FIELDS.setdefault(type(obj), tuple(f.name for f in fields(obj)))
    if names is not None:
        return {name: _plain(getattr(obj, name)) for name in names}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return type(obj)(*(_plain(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((_plain(k), _plain(v)) for k, v in obj.items())
    return copy.deepcopy(obj)


_FIELDS: dict[type, tuple[str, ...]] = {}


_OPTIONAL: dict[str, Any] = {"repeat": 0, "arms": {}, "resampled": ()}
"""Fields a record of a job without repeats or arms leaves out, so its line is what it was before them."""


def _arm_error(arm: ArmResult | None) -> ErrorInfo | None:
    return arm.error if arm is not None else None


def _err(d: Mapping[str, Any] | None) -> ErrorInfo | None:
    return ErrorInfo(**d) if d else None


def _arm(d: Mapping[str, Any] | None) -> ArmResult | None:
    if not d:
        return None
    summary = dict(d.get("trace_summary") or {})
    return ArmResult(
        **{**d, "end_reason": d.get("end_reason", ""), "trace_summary": summary, "error": _err(d.get("error"))}
    )


def read_records(path: str | Path) -> Iterator[Record]:
    """Yield the records of a ``records.jsonl`` file; a torn last line is skipped.

    Args:
        path: The JSONL file (missing file yields nothing).
    """
    p = Path(path)
    if not p.exists():
        return
    with p.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a killed process; that instance reruns
            yield Record.from_dict(d)
