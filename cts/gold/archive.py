"""The static gold archive format: validation, writing (with a sha256 manifest) and loading."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from cts._util.io import write_jsonl
from cts.core.types import (
    Gold,
    Nugget,
)

log = logging.getLogger(__name__)

GOLD_FILE = "gold.jsonl"
RUNS_FILE = "gold_runs.jsonl"
FAILURES_FILE = "failures.jsonl"
MANIFEST_FILE = "manifest.json"
ARCHIVE_FILES: tuple[str, ...] = (GOLD_FILE, RUNS_FILE, FAILURES_FILE, MANIFEST_FILE)

_GOLD_SCHEMA: TypeAdapter[Gold] = TypeAdapter(Gold)


class GoldError(ValueError):
    """Gold is invalid; ``problems`` lists every problem (``file:line: ...`` when read)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class GoldReport:
    """Outcome of one gold-archive build."""

    out_dir: Path
    n_instances: int
    n_gold: int
    failures: tuple[tuple[str, str], ...]
    """``(instance_id, reason)`` of every instance without gold."""
    gold_sha256: str
    """sha256 of ``gold.jsonl`` (also in ``manifest.json``)."""


def failure_summary(report: GoldReport) -> str:
    """One line: how many instances failed, grouped by the kind of reason.

    Args:
        report: A finished build.
    """
    kinds = Counter(reason.split(":", 1)[0] for _, reason in report.failures)
    why = ", ".join(f"{kind}: {n}" for kind, n in kinds.most_common())
    return f"{len(report.failures)} of {report.n_instances} instance(s) have no gold ({why})"


def restore_nugget_ids(nuggets: Iterable[Nugget]) -> tuple[Nugget, ...]:
    """Renumber nuggets ``n1``, ``n2``, ... in order, so ids are stable and unique per gold.

    Extractors (LLMs in particular) may return missing or clashing ids; the
    judge's labels are keyed by these ids, so gold owns them.
    """
    return tuple(replace(n, id=f"n{i}", evidence_ids=tuple(n.evidence_ids)) for i, n in enumerate(nuggets, start=1))


def duplicate_ids(kind: str, ids: Sequence[str]) -> list[str]:
    return [f"duplicate {kind} id {i!r}" for i, n in Counter(ids).items() if n > 1]


def _nugget_problems(n: Nugget, evidence_ids: set[str], archived: set[str] | None) -> list[str]:
    where = f"nugget {n.id!r}"
    out: list[str] = []
    if not str(n.id).strip():
        out.append(f"{where}: empty id")
    if type(n.weight) is not int or not 1 <= n.weight <= 3:
        out.append(f"{where}: weight {n.weight!r} is not an int in 1..3")
    if not n.text.strip():
        out.append(f"{where}: empty text")
    if not n.evidence_ids:
        out.append(f"{where}: cites no evidence")
    for eid in n.evidence_ids:
        if eid not in evidence_ids:
            out.append(f"{where}: cites evidence id {eid!r} not in gold evidence")
        if archived is not None and eid not in archived:
            out.append(f"{where}: cites evidence id {eid!r} not in the archived trace")
    return out


def validate_gold(gold: Gold, archived_evidence_ids: set[str] | None = None) -> list[str]:
    """List everything wrong with one gold entry (empty list = valid).

    Args:
        gold: The gold to check.
        archived_evidence_ids: Ids of every evidence document of the archived
            search run; when given, each cited id must also be among them.

    Returns:
        Human-readable problems: no nuggets, weight not an int in 1..3, empty
        nugget text or id, duplicate nugget or evidence ids, a nugget citing
        nothing or an evidence id that is not in ``gold.evidence`` (or the trace).
    """
    problems: list[str] = []
    if not gold.instance_id.strip():
        problems.append("instance_id: empty")
    if not gold.nuggets:
        problems.append("no nuggets")
    ev_ids = [e.id for e in gold.evidence]
    problems += [f"evidence {e.title!r}: empty id" for e in gold.evidence if not e.id.strip()]
    problems += duplicate_ids("evidence", ev_ids)
    problems += duplicate_ids("nugget", [n.id for n in gold.nuggets])
    for n in gold.nuggets:
        problems += _nugget_problems(n, set(ev_ids), archived_evidence_ids)
    return problems


def gold_to_dict(gold: Gold) -> dict[str, Any]:
    """The JSON object of one gold line (inverse of the loader's parsing)."""
    d = asdict(replace(gold, provenance={}))  # asdict would deep-copy a read-only mapping
    d["provenance"] = dict(gold.provenance)
    return d


def write_gold(golds: Iterable[Gold], path: str | Path) -> None:
    """Validate and atomically write gold as JSONL (one Gold per line, UTF-8).

    Args:
        golds: Gold entries with unique instance ids.
        path: Destination file.

    Raises:
        GoldError: If any entry does not validate (nothing is written).
    """
    golds = list(golds)
    problems = duplicate_ids("instance", [g.instance_id for g in golds])
    problems += [f"{g.instance_id}: {p}" for g in golds for p in validate_gold(g)]
    if problems:
        raise GoldError(problems)
    write_jsonl((gold_to_dict(g) for g in golds), path)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_manifest(path: Path) -> None:
    """Refuse gold edited after archiving (when a manifest sits beside it)."""
    manifest = path.parent / MANIFEST_FILE
    if not manifest.is_file():
        return
    try:
        expected = json.loads(manifest.read_text(encoding="utf-8")).get("sha256", {}).get(path.name)
    except (json.JSONDecodeError, AttributeError) as e:
        raise GoldError([f"{manifest}: unreadable manifest ({e})"]) from e
    if expected and expected != file_sha256(path):
        raise GoldError([f"{path}: sha256 differs from {manifest} (gold was modified after archiving)"])


def parse_gold_line(raw: bytes) -> tuple[Gold | None, list[str]]:
    try:
        gold = _GOLD_SCHEMA.validate_json(raw, strict=True)
    except ValidationError as e:
        return None, [f"{'.'.join(map(str, err['loc'])) or '<row>'}: {err['msg']}" for err in e.errors()]
    return gold, validate_gold(gold)


def load_gold(path: str | Path) -> dict[str, Gold]:
    """Read a gold JSONL file, validating every line; never rebuilds anything.

    Args:
        path: A ``gold.jsonl`` (if a ``manifest.json`` sits beside it, the
            file's sha256 must match the manifest).

    Returns:
        Gold by instance id.

    Raises:
        FileNotFoundError: If the file does not exist.
        GoldError: Listing every bad line as ``file:line: problem``.
    """
    return {gold.instance_id: gold for gold, _, _ in scan_gold(Path(path))}


def scan_gold(p: Path) -> Iterator[tuple[Gold, int, int]]:
    """Validate every line of a gold file, yielding each gold with its byte offset and length.

    A generator, so a caller may keep less than every parsed gold (e.g. offsets only);
    the errors are raised once the whole file has been read.

    Raises:
        FileNotFoundError: If the file does not exist.
        GoldError: Listing every bad line as ``file:line: problem`` (or an empty file).
    """
    if not p.is_file():
        raise FileNotFoundError(f"gold file not found: {p}")
    _check_manifest(p)
    found = 0
    first_line: dict[str, int] = {}
    problems: list[str] = []
    offset = 0
    with p.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            start, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            gold, line_problems = parse_gold_line(raw)
            if gold is not None and gold.instance_id in first_line:
                line_problems.append(
                    f"instance_id: duplicate {gold.instance_id!r} (first at line {first_line[gold.instance_id]})"
                )
            problems += [f"{p}:{lineno}: {m}" for m in line_problems]
            if gold is not None and not line_problems:
                first_line[gold.instance_id] = lineno
                found += 1
                yield gold, start, len(raw)
    if problems:
        raise GoldError(problems)
    if not found:
        raise GoldError([f"{p}: no gold entries"])
