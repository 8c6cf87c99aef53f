"""Building the static gold: the search backend on each intent, then the nugget extractor.

An instance whose search or extraction fails (or whose gold does not validate) is
reported as a failure; a failure of the infrastructure (:func:`cts.core.records.infra_stop`:
spend limit, open circuit, connection, 5xx after the retries, cache) stops the whole build
before anything is archived, since it says nothing about the instance.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cts._util.io import atomic_write_text, write_jsonl
from cts.core.contracts import Extractor, SearchBackend
from cts.core.records import infra_stop, search_call_error
from cts.core.types import Gold, GoldDraft, Instance, SearchResult
from cts.gold.archive import (
    ARCHIVE_FILES,
    FAILURES_FILE,
    GOLD_FILE,
    MANIFEST_FILE,
    RUNS_FILE,
    GoldReport,
    duplicate_ids,
    file_sha256,
    restore_nugget_ids,
    validate_gold,
    write_gold,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _GoldRun:
    """One instance's stage-1 result and either its validated gold or why not."""

    instance: Instance
    result: SearchResult | None
    gold: Gold | None
    failure: str | None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _assemble(fused_query: str, result: SearchResult, draft: GoldDraft, provenance: Mapping[str, Any]) -> Gold:
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
    except Exception as e:  # noqa: BLE001  one failed instance must not stop the build...
        if infra_stop(e):
            raise  # ...but a failed infrastructure stops it
        return None, f"search failed: {type(e).__name__}: {e}"
    if result.end_reason == "error":
        if (failure := search_call_error(result)).infra:
            raise failure
        return result, "search ended with end_reason=error"
    try:
        draft = await extractor.extract(fused_query, result.answer, result.evidence)
        return result, _assemble(fused_query, result, draft, provenance)
    except Exception as e:  # noqa: BLE001
        if infra_stop(e):
            raise
        return result, f"extraction failed: {type(e).__name__}: {e}"


def _finish(instance: Instance, result: SearchResult | None, built: Gold | str) -> _GoldRun:
    if isinstance(built, str):
        return _GoldRun(instance, result, None, built)
    gold = replace(built, instance_id=instance.id)
    archived = {e.id for e in result.evidence} if result else set()
    problems = validate_gold(gold, archived)
    if problems:
        return _GoldRun(instance, result, None, "invalid gold: " + "; ".join(problems))
    return _GoldRun(instance, result, gold, None)


async def _run_all(
    instances: Sequence[Instance],
    search: SearchBackend,
    extractor: Extractor,
    provenance: Mapping[str, Any],
    concurrency: int,
) -> list[_GoldRun]:
    """Build gold for every instance, searching each distinct ``fused_query`` once."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    dup_ids = duplicate_ids("instance", [i.id for i in instances])
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


def _run_row(r: _GoldRun) -> dict[str, Any]:
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
            f"{out}: a gold archive exists ({', '.join(existing)}); to replace it, "
            "set build_gold.overwrite=true on the command line (overwrite=True in Python)"
        )


def _write_archive(out: Path, runs: list[_GoldRun], provenance: Mapping[str, Any]) -> GoldReport:
    golds = [r.gold for r in runs if r.gold is not None]
    failures = [(r.instance.id, r.failure) for r in runs if r.failure is not None]
    # Traces come from arbitrary backends: archive what cannot be JSON as its str.
    write_jsonl((_run_row(r) for r in runs if r.result is not None), out / RUNS_FILE, default=str)
    write_gold(golds, out / GOLD_FILE)
    write_jsonl(({"id": i, "reason": why} for i, why in failures), out / FAILURES_FILE)
    sha = {f: file_sha256(out / f) for f in (GOLD_FILE, RUNS_FILE, FAILURES_FILE)}
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
    atomic_write_text(out / MANIFEST_FILE, json.dumps(manifest, ensure_ascii=False, indent=2) + "\n")
    for f in ARCHIVE_FILES:
        os.chmod(out / f, 0o444)
    return GoldReport(out, len(runs), len(golds), tuple(failures), sha[GOLD_FILE])


@dataclass(frozen=True)
class GoldArchive:
    """Where a gold archive goes, what it records of its build, and what it may replace or lack.

    Attributes:
        out_dir: Archive directory (created).
        provenance: JSON-serialisable build description, stored in every gold and the manifest.
        overwrite: Replace an existing archive (otherwise refuse before searching).
        allow_partial: Accept an archive that lacks some instances' gold (the ``build_gold`` task
            stops otherwise; :func:`build_gold_archive` writes it either way).
    """

    out_dir: Path
    provenance: Mapping[str, Any]
    overwrite: bool = False
    allow_partial: bool = False


async def build_gold_archive(
    instances: Sequence[Instance],
    search: SearchBackend,
    extractor: Extractor,
    archive: GoldArchive,
    *,
    concurrency: int = 4,
) -> GoldReport:
    """Build gold and archive it with the full search runs (see the module docstring).

    Args:
        instances: Instances with unique ids.
        search: The gold backend, run once per distinct ``fused_query``.
        extractor: The nugget extractor.
        archive: Where it goes, its provenance, whether it may replace one.
        concurrency: Distinct queries in flight at once.

    Returns:
        Counts, failures and the sha256 of ``gold.jsonl``.

    Raises:
        FileExistsError: If ``out_dir`` already holds an archive and not ``overwrite``.
    """
    out = Path(archive.out_dir)
    _refuse_existing(out, archive.overwrite)
    runs = await _run_all(instances, search, extractor, archive.provenance, concurrency)
    report = _write_archive(out, runs, archive.provenance)
    log.info("gold archive %s: %d/%d instances with gold", out, report.n_gold, report.n_instances)
    return report
