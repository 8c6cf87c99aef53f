"""The released outputs: candidate files (one answer per instance) and clarify-only files (questions, answers, rewrites).

Their keys are read through a mapping like the gold's (:mod:`cts.gold.mapping`): each key's names
are tried in order (:data:`OUTPUT_NAMES`, the first is the default) on the file's first record,
unless the user names the file's key. A file that fits none of a required key's names is one line:
the file, its first line, its keys, and the option to set. The system and the budget k come from
the file's name (:func:`system_and_k`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cts.core.types import UNKNOWN
from cts.data.csvfile import derived_id

OUTPUT_NAMES: Mapping[str, tuple[str, ...]] = {
    "id": ("id", "instance_id", "qid", "query_id", "uid", "idx", "index"),
    "answer": ("answer", "candidate", "prediction", "pred", "output", "response", "final_answer", "y_hat"),
    "query": ("rewritten_query", "rewrite", "rewritten", "q_hat", "rq", "query"),
    "blurred_query": ("blurred_query", "bq"),
    "fused_query": ("fused_query", "oq"),
    "questions": ("questions", "clarification_questions", "clarifying_questions", "clarify_questions", "cqs"),
    "answers": ("answers", "ua_answers", "user_answers"),
    "qa": ("qa_pairs", "qa", "clarifications", "turns"),
    "score": ("restore_score_100", "score"),
}
"""Mapping key -> the names tried in order; the first is the default (and what :mod:`cts.release.export` writes)."""
_PAIR_QUESTION = ("question", "q", "cq")
_PAIR_ANSWER = ("answer", "a", "ua_answer")
UNKNOWN_WORDS = frozenset({"unknown", "未知", "不知道"})
"""Answers read as the protocol's ``unknown`` (case and surrounding punctuation ignored)."""

NAME_PATTERN = r"^(?P<system>.+?)_?k(?P<k>\d+)(?:__|_|\.|$)"
"""Default pattern of a file name: ``ebk1__cand_hard518.jsonl`` is system ``eb`` at k = 1."""
ORIG_PATTERN = r"^(orig|none|baseline)(?:__|_|\.|$)"
"""A file named so holds the orig arm (no clarification; k = 0)."""

Kind = Literal["candidates", "clarify_only"]


class OutputLayoutError(ValueError):
    """An output file's name or keys fit nothing cts knows: one line saying what to set."""


@dataclass(frozen=True)
class Output:
    """One instance's released output (either file kind; the other's keys are empty)."""

    id: str
    line: int
    answer: str | None = None
    query: str | None = None
    questions: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()
    score: float | None = None


@dataclass(frozen=True)
class OutputScan:
    """What an output file held: the good rows, the problems, the keys used."""

    path: Path
    rows: tuple[Output, ...]
    problems: tuple[str, ...]
    names: Mapping[str, str | None]
    n_records: int = 0


def system_and_k(path: str | Path, pattern: str = NAME_PATTERN) -> tuple[str, int]:
    """The system and k a file's name says (``orig``, 0 for an orig file).

    Raises:
        OutputLayoutError: The name fits neither ``pattern`` nor :data:`ORIG_PATTERN`.
    """
    name = Path(path).name
    if re.match(ORIG_PATTERN, name):
        return "orig", 0
    found = re.match(pattern, name)
    if not found or not found.groupdict().get("system") or not found.groupdict().get("k"):
        raise OutputLayoutError(
            f"{path}: the name says no system and k (pattern {pattern}); "
            "rename it like ebk1__cand_hard518.jsonl, or pass --name-pattern with groups (?P<system>...) and (?P<k>...)"
        )
    return found["system"], int(found["k"])


def unknown_or(answer: str) -> str:
    """``answer``, or the protocol's ``unknown`` when it is one of :data:`UNKNOWN_WORDS`."""
    return UNKNOWN if answer.strip().strip(".。!！ ").lower() in UNKNOWN_WORDS else answer


def resolve(sample: Mapping[str, Any], given: Mapping[str, str]) -> dict[str, str | None]:
    """The file's key for each mapping key, from its first record (a key the user named is taken as is)."""
    out: dict[str, str | None] = {}
    for key, options in OUTPUT_NAMES.items():
        out[key] = given[key] if key in given else next((n for n in options if n in sample), None)
    if out["query"] is not None and out["query"] in (out["blurred_query"], out["fused_query"]):
        out["query"] = None
    return out


def layout_problem(
    path: Path, line: int, sample: Mapping[str, Any], names: Mapping[str, str | None], kind: Kind
) -> str | None:
    """One line for the first required key this file has under no name (None when it fits)."""
    need = ["answer"] if kind == "candidates" else ["questions"]
    if names["id"] is None and not (names["blurred_query"] and names["fused_query"]):
        need = ["id", *need]
    for key in need:
        if names[key] is None and not (key == "questions" and names["qa"] is not None):
            tried = OUTPUT_NAMES[key] + (OUTPUT_NAMES["qa"] if key == "questions" else ())
            return (
                f"{path}:{line}: the {kind} file fits no name of {key!r} (tried {', '.join(tried)}); "
                f"it has {sorted(sample)}: pass --field {key}=<one of them>"
            )
    return None


def _texts(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _pairs(value: Any) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    if not isinstance(value, list) or not all(isinstance(p, dict) for p in value):
        return None
    qs = [next((p[k] for k in _PAIR_QUESTION if k in p), None) for p in value]
    ans = [next((p[k] for k in _PAIR_ANSWER if k in p), None) for p in value]
    if not all(isinstance(q, str) for q in qs) or not all(isinstance(a, str) for a in ans):
        return None
    return tuple(qs), tuple(ans)  # type: ignore[arg-type]  # checked: every one a str


def _row_id(row: Mapping[str, Any], names: Mapping[str, str | None]) -> str | None:
    if names["id"] is not None:
        value = row.get(names["id"])
        ok = isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip()
        return str(value) if ok else None
    bq, fq = row.get(names["blurred_query"] or ""), row.get(names["fused_query"] or "")
    return derived_id(bq, fq) if isinstance(bq, str) and isinstance(fq, str) else None


def _clarify(row: Mapping[str, Any], names: Mapping[str, str | None]) -> tuple[tuple[str, ...], tuple[str, ...]] | str:
    if names["questions"] is not None:
        qs, ans = _texts(row.get(names["questions"])), _texts(row.get(names["answers"] or "") or [])
        if qs is None or ans is None:
            return f"{names['questions']}/{names['answers']}: must be strings or lists of strings"
        if len(ans) > len(qs):
            return f"{len(ans)} answers to {len(qs)} questions"
        return qs, ans
    pairs = _pairs(row.get(names["qa"] or ""))
    return pairs if pairs is not None else f"{names['qa']}: must be a list of {{question, answer}} objects"


def parse_row(row: Any, line: int, names: Mapping[str, str | None], kind: Kind) -> tuple[Output | None, list[str]]:
    """One record as an :class:`Output`, or its problems."""
    if not isinstance(row, dict):
        return None, [f"<record>: must be a JSON object, got {type(row).__name__}"]
    rid = _row_id(row, names)
    problems = [] if rid else [f"{names['id'] or 'blurred_query/fused_query'}: missing or empty"]
    answer, query = row.get(names["answer"] or ""), row.get(names["query"] or "")
    if kind == "candidates" and not isinstance(answer, str):
        problems.append(f"{names['answer']}: missing or not a string")
    score = row.get(names["score"] or "")
    score = float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None
    clarify = _clarify(row, names) if kind == "clarify_only" else ((), ())
    problems += [clarify] if isinstance(clarify, str) else []
    if problems or isinstance(clarify, str):
        return None, problems
    qs, ans = clarify
    return Output(
        str(rid),
        line,
        answer if isinstance(answer, str) else None,
        query if isinstance(query, str) else None,
        qs,
        tuple(unknown_or(a) for a in ans),
        score,
    ), []


def _lines(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                yield lineno, None, f"invalid UTF-8 ({e.reason} at byte {e.start} of the line)"
                continue
            if text.strip():
                try:
                    yield lineno, json.loads(text), None
                except json.JSONDecodeError as e:
                    yield lineno, None, f"invalid JSON ({e.msg} at column {e.colno})"


def scan_outputs(path: str | Path, kind: Kind, fields: Mapping[str, str] | None = None) -> OutputScan:
    """Read every record of a candidate or clarify-only file, keeping the good rows beside the problems.

    Raises:
        FileNotFoundError: The file does not exist.
        OutputLayoutError: It fits no name of a required key, or has no record (one line).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{kind} file not found: {p}")
    given = dict(fields or {})
    if unknown := sorted(set(given) - set(OUTPUT_NAMES)):
        raise OutputLayoutError(f"--field: unknown key(s) {unknown}; the keys are {list(OUTPUT_NAMES)}")
    names: dict[str, str | None] | None = None
    rows: list[Output] = []
    problems: list[str] = []
    first: dict[str, int] = {}
    n = 0
    for line, row, problem in _lines(p):
        n += 1
        if names is None and problem is None and isinstance(row, dict):
            names = resolve(row, given)
            if (layout := layout_problem(p, line, row, names, kind)) is not None:
                raise OutputLayoutError(layout)
        out, found = (
            (None, [problem or "no record before this line"])
            if problem or names is None
            else parse_row(row, line, names, kind)
        )
        if out is not None and out.id in first:
            found = [f"duplicate id {out.id!r} (first at line {first[out.id]})"]
        problems += [f"{p}:{line}: {m}" for m in found]
        if out is not None and not found:
            first[out.id] = line
            rows.append(out)
    if names is None:
        raise OutputLayoutError(f"{p}: no record (the file has no JSON object line)")
    return OutputScan(p, tuple(rows), tuple(problems), names, n)


def unknown_ids(scan: OutputScan, known: Sequence[str] | set[str], what: str) -> list[str]:
    """One problem per row whose id is not in ``known`` (e.g. the gold's ids)."""
    have = set(known)
    return [f"{scan.path}:{r.line}: id {r.id!r} is not in {what}" for r in scan.rows if r.id not in have]
