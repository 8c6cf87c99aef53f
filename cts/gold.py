"""Static gold (paper section 4.2): built once per ``fused_query``, then read-only.

Stage 1 runs the search backend once on each intent query ``q*`` and archives
its answer and evidence trace; stage 2 has an :class:`~cts.types.Extractor`
turn ``q*``, the answer and the evidence into weighted nuggets that cite
evidence ids. Gold that does not validate is reported as a failure and never
written; :func:`load_gold` refuses such a file instead of rebuilding it.

Archive layout written by :func:`build_gold_archive` (files are chmod 0444)::

    gold.jsonl        one validated Gold per line (what the dataset loader reads)
    gold_runs.jsonl   per instance: id, fused_query, answer, rule, end reason, all evidence, trace
    failures.jsonl    per failed instance: id, reason
    manifest.json     counts, provenance, sha256 of each file
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from cts.data import atomic_write_text, write_jsonl
from cts.types import (
    BudgetExceeded,
    Extractor,
    Gold,
    GoldDraft,
    Instance,
    Nugget,
    SearchBackend,
    SearchResult,
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


@dataclass(frozen=True)
class _Run:
    """One instance's stage-1 result and either its validated gold or why not."""

    instance: Instance
    result: SearchResult | None
    gold: Gold | None
    failure: str | None


def restore_nugget_ids(nuggets: Iterable[Nugget]) -> tuple[Nugget, ...]:
    """Renumber nuggets ``n1``, ``n2``, ... in order, so ids are stable and unique per gold.

    Extractors (LLMs in particular) may return missing or clashing ids; the
    judge's labels are keyed by these ids, so gold owns them.
    """
    return tuple(
        replace(n, id=f"n{i}", evidence_ids=tuple(n.evidence_ids))
        for i, n in enumerate(nuggets, start=1)
    )


def _duplicates(kind: str, ids: Sequence[str]) -> list[str]:
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
    problems += _duplicates("evidence", ev_ids)
    problems += _duplicates("nugget", [n.id for n in gold.nuggets])
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
    problems = _duplicates("instance", [g.instance_id for g in golds])
    problems += [f"{g.instance_id}: {p}" for g in golds for p in validate_gold(g)]
    if problems:
        raise GoldError(problems)
    write_jsonl((gold_to_dict(g) for g in golds), path)


def _sha256(path: Path) -> str:
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
    if expected and expected != _sha256(path):
        raise GoldError(
            [f"{path}: sha256 differs from {manifest} (gold was modified after archiving)"]
        )


def _parse_gold_line(raw: bytes) -> tuple[Gold | None, list[str]]:
    try:
        gold = _GOLD_SCHEMA.validate_json(raw, strict=True)
    except ValidationError as e:
        return None, [
            f"{'.'.join(map(str, err['loc'])) or '<row>'}: {err['msg']}" for err in e.errors()
        ]
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
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"gold file not found: {p}")
    _check_manifest(p)
    golds: dict[str, Gold] = {}
    first_line: dict[str, int] = {}
    problems: list[str] = []
    with p.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            gold, line_problems = _parse_gold_line(raw)
            if gold is not None and gold.instance_id in first_line:
                line_problems.append(
                    f"instance_id: duplicate {gold.instance_id!r} (first at line {first_line[gold.instance_id]})"
                )
            problems += [f"{p}:{lineno}: {m}" for m in line_problems]
            if gold is not None and not line_problems:
                first_line[gold.instance_id] = lineno
                golds[gold.instance_id] = gold
    if problems:
        raise GoldError(problems)
    if not golds:
        raise GoldError([f"{p}: no gold entries"])
    return golds


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _assemble(
    fused_query: str, result: SearchResult, draft: GoldDraft, provenance: Mapping[str, Any]
) -> Gold:
    """Gold (instance id left empty) citing the subset of the run's evidence its nuggets use."""
    nuggets = restore_nugget_ids(draft.nuggets)
    cited = {eid for n in nuggets for eid in n.evidence_ids}
    # Keep search order; drop exact repeats, keep same-id conflicts for validation to flag.
    evidence = tuple(dict.fromkeys(e for e in result.evidence if e.id in cited))
    run = {
        "fused_query": fused_query,
        "answer": result.answer,
        "answer_rule": result.answer_rule,
        "end_reason": result.end_reason,
        "date": _now(),
        "n_evidence": len(result.evidence),
    }
    return Gold(
        instance_id="",
        nuggets=nuggets,
        evidence=evidence,
        must_cover=tuple(draft.must_cover),
        missing_evidence=tuple(draft.missing_evidence),
        unsupported_claims=tuple(draft.unsupported_claims),
        provenance={**provenance, **run},
    )


async def _build_one(
    fused_query: str, search: SearchBackend, extractor: Extractor, provenance: Mapping[str, Any]
) -> tuple[SearchResult | None, Gold | str]:
    """Stage 1 + 2 for one intent query: ``(search result, gold or failure reason)``."""
    try:
        result = await search.search(fused_query)
    except BudgetExceeded:
        raise
    except Exception as e:  # noqa: BLE001  one failed instance must not stop the build
        return None, f"search failed: {type(e).__name__}: {e}"
    if result.end_reason == "error":
        return result, "search ended with end_reason=error"
    try:
        draft = await extractor.extract(fused_query, result.answer, result.evidence)
        return result, _assemble(fused_query, result, draft, provenance)
    except BudgetExceeded:
        raise
    except Exception as e:  # noqa: BLE001
        return result, f"extraction failed: {type(e).__name__}: {e}"


def _finish(instance: Instance, result: SearchResult | None, built: Gold | str) -> _Run:
    if isinstance(built, str):
        return _Run(instance, result, None, built)
    gold = replace(built, instance_id=instance.id)
    archived = {e.id for e in result.evidence} if result else set()
    problems = validate_gold(gold, archived)
    if problems:
        return _Run(instance, result, None, "invalid gold: " + "; ".join(problems))
    return _Run(instance, result, gold, None)


async def _run_all(
    instances: Sequence[Instance],
    search: SearchBackend,
    extractor: Extractor,
    provenance: Mapping[str, Any],
    concurrency: int,
) -> list[_Run]:
    """Build gold for every instance, searching each distinct ``fused_query`` once."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    dup_ids = _duplicates("instance", [i.id for i in instances])
    if dup_ids:
        raise ValueError("; ".join(dup_ids))
    json.dumps(dict(provenance))  # fail before any search if provenance cannot be archived
    sem = asyncio.Semaphore(concurrency)

    async def one(fq: str) -> tuple[SearchResult | None, Gold | str]:
        async with sem:
            return await _build_one(fq, search, extractor, provenance)

    queries = list(dict.fromkeys(i.fused_query for i in instances))
    built = dict(zip(queries, await asyncio.gather(*(one(q) for q in queries)), strict=True))
    runs = [_finish(i, *built[i.fused_query]) for i in instances]
    for r in runs:
        if r.failure:
            log.warning("gold %s: %s", r.instance.id, r.failure)
    return runs


async def build_gold(
    instances: Sequence[Instance],
    search: SearchBackend,
    extractor: Extractor,
    *,
    provenance: Mapping[str, Any],
    concurrency: int = 4,
) -> tuple[list[Gold], list[tuple[str, str]]]:
    """Build validated static gold for each instance (nothing is written).

    Args:
        instances: Instances with unique ids; each distinct ``fused_query`` is searched once.
        search: The gold backend, run on ``fused_query``.
        extractor: Turns ``(fused_query, answer, evidence)`` into a :class:`GoldDraft`.
        provenance: JSON-serialisable description of the build (backend, model,
            prompt hash ...); per-instance answer, answer_rule, end_reason,
            date, n_evidence and fused_query are added.
        concurrency: Distinct queries in flight at once.

    Returns:
        ``(golds in instance order, [(instance_id, reason) of failures]``.
    """
    runs = await _run_all(instances, search, extractor, provenance, concurrency)
    golds = [r.gold for r in runs if r.gold is not None]
    failures = [(r.instance.id, r.failure) for r in runs if r.failure is not None]
    return golds, failures


def _run_row(r: _Run) -> dict[str, Any]:
    res = r.result
    assert res is not None
    return {
        "id": r.instance.id,
        "fused_query": r.instance.fused_query,
        "answer": res.answer,
        "answer_rule": res.answer_rule,
        "end_reason": res.end_reason,
        "evidence": [asdict(e) for e in res.evidence],
        "trace": [dict(t) for t in res.trace],
        "summary": dict(res.summary),
    }


def _refuse_existing(out: Path, overwrite: bool) -> None:
    existing = [f for f in ARCHIVE_FILES if (out / f).exists()]
    if existing and not overwrite:
        raise FileExistsError(
            f"{out}: a gold archive exists ({', '.join(existing)}); pass overwrite=True"
        )


def _write_archive(out: Path, runs: list[_Run], provenance: Mapping[str, Any]) -> GoldReport:
    golds = [r.gold for r in runs if r.gold is not None]
    failures = [(r.instance.id, r.failure) for r in runs if r.failure is not None]
    # Traces come from arbitrary backends: archive what cannot be JSON as its str.
    write_jsonl((_run_row(r) for r in runs if r.result is not None), out / RUNS_FILE, default=str)
    write_gold(golds, out / GOLD_FILE)
    write_jsonl(({"id": i, "reason": why} for i, why in failures), out / FAILURES_FILE)
    sha = {f: _sha256(out / f) for f in (GOLD_FILE, RUNS_FILE, FAILURES_FILE)}
    manifest = {
        "created": _now(),
        "counts": {
            "instances": len(runs),
            "gold": len(golds),
            "failures": len(failures),
            "fused_queries": len({r.instance.fused_query for r in runs}),
        },
        "provenance": dict(provenance),
        "sha256": sha,
    }
    atomic_write_text(
        out / MANIFEST_FILE, json.dumps(manifest, ensure_ascii=False, indent=2) + "\n"
    )
    for f in ARCHIVE_FILES:
        os.chmod(out / f, 0o444)
    return GoldReport(out, len(runs), len(golds), tuple(failures), sha[GOLD_FILE])


async def build_gold_archive(
    instances: Sequence[Instance],
    search: SearchBackend,
    extractor: Extractor,
    out_dir: str | Path,
    *,
    provenance: Mapping[str, Any],
    concurrency: int = 4,
    overwrite: bool = False,
) -> GoldReport:
    """Build gold and archive it with the full search runs (see the module docstring).

    Args:
        instances: Instances with unique ids.
        search: The gold backend, run once per distinct ``fused_query``.
        extractor: The nugget extractor.
        out_dir: Archive directory (created).
        provenance: JSON-serialisable build description, stored in every gold and the manifest.
        concurrency: Distinct queries in flight at once.
        overwrite: Replace an existing archive (otherwise refuse before searching).

    Returns:
        Counts, failures and the sha256 of ``gold.jsonl``.

    Raises:
        FileExistsError: If ``out_dir`` already holds an archive and not ``overwrite``.
    """
    out = Path(out_dir)
    _refuse_existing(out, overwrite)
    runs = await _run_all(instances, search, extractor, provenance, concurrency)
    report = _write_archive(out, runs, provenance)
    log.info("gold archive %s: %d/%d instances with gold", out, report.n_gold, report.n_instances)
    return report
