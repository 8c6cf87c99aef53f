"""Gold in another layout (a released benchmark's JSONL), read as cts gold through a declared mapping.

Each mapping key names one part of a gold record (paper Section 4.2). Its value is the
file's key for it; left unset, the names of :data:`GOLD_NAMES` are tried in order (the
first is the paper's or cts's own) and the first one the file's first record has is used for the
whole file. A required key the file has under none of them is one problem: the file, its
first line, the keys it has, and the mapping key to set (``dataset.gold_fields.<key>=<name>``).

Every record is then checked (file:line: problem); the good ones are kept beside the problems,
so a caller may refuse the file and still say how many records were good. A layout whose nuggets
have no evidence ids at all is read without them (``inspect`` says so); one nugget without them,
in a file whose others have them, is a problem.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cts.core.types import Evidence, Gold, Nugget
from cts.gold.archive import GoldError, validate_gold

GOLD_NAMES: Mapping[str, tuple[str, ...]] = {
    # record level
    "id": ("id", "instance_id", "qid", "query_id", "uid", "idx", "index"),
    "query": ("fused_query", "query", "intent_query", "q_star", "oq"),
    "nuggets": ("nuggets", "gold_nuggets", "golden_nuggets", "nugget_list"),
    "evidence": ("evidence", "evidence_pool", "evidences", "snippets", "documents"),
    "must_cover": ("must_cover", "sub_questions", "subquestions"),
    "missing_evidence": ("missing_evidence", "missing"),
    "unsupported_claims": ("unsupported_claims", "unsupported", "unsupported_claim"),
    # one nugget
    "nugget_id": ("id", "nugget_id", "nid"),
    "text": ("text", "nugget", "statement", "content", "claim"),
    "weight": ("weight", "w", "importance"),
    "evidence_ids": ("evidence_ids", "source_ids", "evidence_id", "support_ids", "sources", "citations", "evidence"),
    # one evidence snippet of the pool
    "evidence_key": ("id", "evidence_id", "source_id", "sid", "doc_id"),
    "snippet": ("snippet", "text", "content"),
    "title": ("title", "name"),
    "source": ("source", "url", "link"),
}
"""Mapping key -> the names tried in order; the first is the default."""

REQUIRED: tuple[str, ...] = ("nuggets", "text", "weight")
"""Keys a gold file must have under some name (the id may instead be matched through ``query``)."""
_UNCITED = ": cites no evidence"
_RECORD = ("id", "query", "nuggets", "evidence", "must_cover", "missing_evidence", "unsupported_claims")
_NUGGET = ("nugget_id", "text", "weight", "evidence_ids")
_EVIDENCE = ("evidence_key", "snippet", "title", "source")


class GoldLayoutError(GoldError):
    """A gold file fits no name of a required mapping key: one line saying which key to set."""

    def __init__(self, line: str) -> None:
        super().__init__([line])


@dataclass(frozen=True)
class GoldScan:
    """What a gold file held: the good gold (keyed by id, or by intent query), the problems, the mapping used."""

    path: Path
    golds: tuple[Gold, ...]
    problems: tuple[str, ...]
    names: Mapping[str, str | None]
    """Mapping key -> the file's key used (None: the file has none)."""
    n_records: int = 0
    by_query: Mapping[str, str] = field(default_factory=dict)
    """Intent query -> gold key, when records have no id (they are then matched to instances by ``fused_query``)."""
    keys: frozenset[str] = frozenset()
    """The id (or, without ids, the intent query) of every record that has one, good or bad."""


def check_fields(fields: Mapping[str, str | None] | None) -> dict[str, str]:
    """The set keys of a user's mapping; refuse a key :data:`GOLD_NAMES` does not have."""
    given = {k: str(v) for k, v in (fields or {}).items() if v}
    unknown = sorted(set(given) - set(GOLD_NAMES))
    if unknown:
        raise GoldLayoutError(f"dataset.gold_fields: unknown key(s) {unknown}; the keys are {list(GOLD_NAMES)}")
    return given


def _pick(keys: Sequence[str], options: Sequence[str], given: str | None) -> str | None:
    if given is not None:
        return given if given in keys else None
    return next((name for name in options if name in keys), None)


def resolve(sample: Mapping[str, Any], given: Mapping[str, str]) -> dict[str, str | None]:
    """The file's key for every mapping key, from its first record (and that record's first nugget and evidence)."""
    names = {k: _pick(list(sample), GOLD_NAMES[k], given.get(k)) for k in _RECORD}
    nuggets = sample.get(names["nuggets"] or "")
    nugget = next((n for n in nuggets if isinstance(n, dict)), {}) if isinstance(nuggets, list) else {}
    names.update({k: _pick(list(nugget), GOLD_NAMES[k], given.get(k)) for k in _NUGGET})
    pool = sample.get(names["evidence"] or "")
    item = next((e for e in pool if isinstance(e, dict)), {}) if isinstance(pool, list) else {}
    names.update({k: _pick(list(item), GOLD_NAMES[k], given.get(k)) for k in _EVIDENCE})
    if names["evidence"] is not None and names["evidence"] == names["evidence_ids"]:
        names["evidence"] = None  # the nuggets' own key, not a pool
    return names


def layout_problem(path: Path, lineno: int, sample: Mapping[str, Any], names: Mapping[str, str | None]) -> str | None:
    """One line naming the first required key the file fits under no name (None when it fits)."""
    nuggets = sample.get(names["nuggets"] or "")
    first = next((n for n in nuggets if isinstance(n, dict)), {}) if isinstance(nuggets, list) else {}
    if names["id"] is None and names["query"] is None:
        key, tried, keys = "id", GOLD_NAMES["id"] + GOLD_NAMES["query"], sorted(sample)
    else:
        missing = next((k for k in REQUIRED if names[k] is None), None)
        if missing is None:
            return None
        key, tried = missing, GOLD_NAMES[missing]
        keys = sorted(sample) if missing == "nuggets" else sorted(first)
    where = "its nuggets have" if key in _NUGGET else "it has"
    return (
        f"{path}:{lineno}: the gold fits no name of {key!r} (tried {', '.join(tried)}); {where} "
        f"{keys}: set dataset.gold_fields.{key}=<one of them>"
    )


def _strings(value: Any, what: str) -> tuple[tuple[str, ...], str | None]:
    if value is None:
        return (), None
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return (str(value),), None
    if isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return tuple(str(v) for v in value), None
    return (), f"{what}: must be a string or a list of strings, got {type(value).__name__}"


def _weight(value: Any) -> int | str:
    """The weight as an int, or the problem."""
    if value is None:
        return "missing"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int or not 1 <= value <= 3:
        return f"{value!r} is not an integer in 1..3"
    return value


def _nugget(raw: Any, i: int, names: Mapping[str, str | None]) -> tuple[Nugget | None, list[str]]:
    where = f"nugget {i}"
    if not isinstance(raw, dict):
        return None, [f"{where}: must be an object, got {type(raw).__name__}"]
    text = raw.get(names["text"] or "")
    weight = _weight(raw.get(names["weight"] or ""))
    ids, id_problem = _strings(raw.get(names["evidence_ids"] or ""), f"{where}: {names['evidence_ids']}")
    problems = [] if isinstance(text, str) and text.strip() else [f"{where}: {names['text']}: missing or empty"]
    problems += [f"{where}: {names['weight']}: {weight}"] if isinstance(weight, str) else []
    problems += [id_problem] if id_problem else []
    if problems or isinstance(weight, str):
        return None, problems
    own = raw.get(names["nugget_id"] or "") if names["nugget_id"] else None
    return Nugget(str(own) if own not in (None, "") else f"n{i}", str(text), weight, ids), []


def _evidence(raw: Any, names: Mapping[str, str | None]) -> Evidence | None:
    if not isinstance(raw, dict) or raw.get(names["evidence_key"] or "") in (None, ""):
        return None
    source, title, snippet = (str(raw.get(names[k] or "") or "") for k in ("source", "title", "snippet"))
    return Evidence(str(raw[names["evidence_key"] or ""]), source, title, snippet)


def _record_key(row: Mapping[str, Any], names: Mapping[str, str | None]) -> tuple[str | None, str | None]:
    """``(gold key, query)``: the id when the file has ids, else the intent query."""
    query = row.get(names["query"] or "")
    query = query if isinstance(query, str) and query.strip() else None
    if names["id"] is not None:
        value = row.get(names["id"])
        ok = isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip()
        return (str(value) if ok else None), query
    return query, query


def parse_record(row: Any, names: Mapping[str, str | None]) -> tuple[Gold | None, str | None, list[str]]:
    """One gold record as cts gold (its nuggets renumbered only when they have no ids), its query, problems."""
    if not isinstance(row, dict):
        return None, None, [f"<record>: must be a JSON object, got {type(row).__name__}"]
    key, query = _record_key(row, names)
    problems = [] if key else [f"{names['id'] or names['query']}: missing or empty"]
    raw = row.get(names["nuggets"] or "")
    if not isinstance(raw, list) or not raw:
        return None, query, [*problems, f"{names['nuggets']}: missing, empty or not a list"]
    parsed = [_nugget(n, i, names) for i, n in enumerate(raw, start=1)]
    problems += [p for _, ps in parsed for p in ps]
    nuggets = tuple(n for n, _ in parsed if n is not None)
    pool = row.get(names["evidence"] or "") if names["evidence"] else None
    cited = sorted({e for n in nuggets for e in n.evidence_ids})
    evidence = tuple(e for x in pool or [] if (e := _evidence(x, names)) is not None) if pool is not None else ()
    if pool is None:  # no pool in the file: the cited ids are all there is (nothing to check them against)
        evidence = tuple(Evidence(i, "", "", "") for i in cited)
    lists = {k: _strings(row.get(names[k] or ""), str(names[k]))[0] for k in _RECORD[4:]}
    gold = Gold(str(key or ""), nuggets, evidence, **lists, provenance={"layout": "mapped"})
    uncited = names["evidence_ids"] is None  # a layout without evidence ids: nothing to check, said by inspect
    problems += [
        p for p in validate_gold(gold) if not p.startswith("instance_id") and not (uncited and p.endswith(_UNCITED))
    ]
    return (gold if not problems else None), query, problems


def _lines(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """``(line, decoded record, problem)`` for each non-blank line (a BOM on the first line is dropped)."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                yield lineno, None, f"invalid UTF-8 ({e.reason} at byte {e.start} of the line)"
                continue
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line), None
            except json.JSONDecodeError as e:
                yield lineno, None, f"invalid JSON ({e.msg} at column {e.colno})"


def scan_mapped_gold(path: str | Path, fields: Mapping[str, str | None] | None = None) -> GoldScan:
    """Read every record of a gold file through the mapping (see the module docstring).

    Raises:
        FileNotFoundError: The file does not exist.
        GoldLayoutError: The mapping names an unknown key, or the file fits no name of a required key
            (one line: file, first line, its keys, the key to set), or it has no record.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"gold file not found: {p}")
    given = check_fields(fields)
    names: dict[str, str | None] | None = None
    golds: list[Gold] = []
    problems: list[str] = []
    first: dict[str, int] = {}
    by_query: dict[str, str] = {}
    keys: set[str] = set()
    n = 0
    for lineno, row, problem in _lines(p):
        n += 1
        if names is None and problem is None and isinstance(row, dict):
            names = resolve(row, given)
            if (layout := layout_problem(p, lineno, row, names)) is not None:
                raise GoldLayoutError(layout)
        gold, query, found = (None, None, [problem]) if problem or names is None else parse_record(row, names)
        if names is not None and isinstance(row, dict) and (key := _record_key(row, names)[0]):
            keys.add(key)
        if gold is not None and gold.instance_id in first:
            found = [f"duplicate {gold.instance_id!r} (first at line {first[gold.instance_id]})"]
        problems += [f"{p}:{lineno}: {m}" for m in found if m]
        if gold is not None and not found:
            first[gold.instance_id] = lineno
            golds.append(gold)
            if names and names["id"] is None and query:
                by_query[query] = gold.instance_id
    if names is None:
        raise GoldLayoutError(f"{p}: no gold record (the file has no JSON object line)")
    return GoldScan(p, tuple(golds), tuple(problems), names, n, by_query, frozenset(keys))


__all__ = ["GOLD_NAMES", "GoldLayoutError", "GoldScan", "resolve", "scan_mapped_gold"]
