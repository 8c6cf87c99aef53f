"""Export cts runs in the release's layout, so the release's own scorer reads them.

Each job of a job or sweep dir gives ``candidates/<system>k<k>__cand_<dataset>.jsonl`` (per
instance: id, the clarified arm's answer, the rewrite, its score) and
``clarify_only/<system>k<k>__clarify_<dataset>.jsonl`` (id, questions, answers, rewrite), in the
default names of :data:`cts.release.outputs.OUTPUT_NAMES` or the names a released file uses
(``names``: the mapping, reversed); the orig arm goes to
``candidates/orig__cand_<dataset>.jsonl``. Only the first run of each instance (repeat 0) is
written; an arm without an answer (its search failed) is left out and counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cts.core.records import ArmResult, Record
from cts.release.outputs import OUTPUT_NAMES
from cts.report.jobs import Job, load_jobs

DEFAULT_NAMES: Mapping[str, str] = {key: names[0] for key, names in OUTPUT_NAMES.items()}
"""The key each part is written under, unless the export is told the names of a released file."""


@dataclass(frozen=True)
class Exported:
    """One file written by the export."""

    path: Path
    n_rows: int
    n_without_answer: int


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "system"


def candidate_row(r: Record, arm: ArmResult, names: Mapping[str, str] = DEFAULT_NAMES) -> dict[str, Any]:
    """One candidate line: id, answer, the searched query, the score when judged."""
    row: dict[str, Any] = {names["id"]: r.id, names["answer"]: arm.answer, names["query"]: arm.query}
    if arm.score is not None:
        row[names["score"]] = arm.score
    return row


def clarify_row(r: Record, names: Mapping[str, str] = DEFAULT_NAMES) -> dict[str, Any]:
    """One clarify-only line: id, questions, the UA's answers, the rewrite."""
    return {
        names["id"]: r.id,
        names["questions"]: list(r.questions),
        names["answers"]: list(r.answers),
        names["query"]: r.rewritten_query,
    }


def _has_answer(arm: ArmResult | None) -> bool:
    return arm is not None and (arm.error is None or arm.error.stage == "judge")


def _write(path: Path, rows: Sequence[Mapping[str, Any]], missing: int) -> Exported:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return Exported(path, len(rows), missing)


def _first_runs(job: Job) -> list[Record]:
    return sorted((r for r in job.records if r.repeat == 0), key=lambda r: r.id)


def export_job(job: Job, out_dir: Path, dataset: str, names: Mapping[str, str] = DEFAULT_NAMES) -> list[Exported]:
    """The candidate and clarify-only files of one job (none for a job that asked nothing)."""
    records = _first_runs(job)
    stem = f"{_safe(job.label or job.system)}k{job.k}"
    judged = [(r, r.clarified) for r in records if _has_answer(r.clarified)]
    return [
        _write(
            out_dir / "candidates" / f"{stem}__cand_{dataset}.jsonl",
            [candidate_row(r, arm, names) for r, arm in judged if arm is not None],
            len(records) - len(judged),
        ),
        _write(
            out_dir / "clarify_only" / f"{stem}__clarify_{dataset}.jsonl", [clarify_row(r, names) for r in records], 0
        ),
    ]


def export_orig(
    jobs: Sequence[Job], out_dir: Path, dataset: str, names: Mapping[str, str] = DEFAULT_NAMES
) -> Exported | None:
    """The orig arm's candidate file, from the first job that has each instance's orig answer."""
    rows: dict[str, dict[str, Any]] = {}
    for job in jobs:
        for r in _first_runs(job):
            if r.id not in rows and _has_answer(r.orig) and r.orig is not None:
                rows[r.id] = candidate_row(r, r.orig, names)
    if not rows:
        return None
    return _write(out_dir / "candidates" / f"orig__cand_{dataset}.jsonl", [rows[i] for i in sorted(rows)], 0)


def export_runs(
    source: str | Path | Sequence[str | Path],
    out_dir: str | Path,
    dataset: str | None = None,
    names: Mapping[str, str | None] | None = None,
) -> list[Exported]:
    """Write every job of ``source`` in the release's layout under ``out_dir``.

    Args:
        source: A job dir, a sweep dir, or several.
        out_dir: Where ``candidates/`` and ``clarify_only/`` go.
        dataset: The name's suffix (default: each job's dataset choice).
        names: The key of each part (e.g. a released file's, :attr:`cts.release.outputs.OutputScan.names`);
            a part it leaves out keeps its default name.

    Raises:
        FileNotFoundError: ``source`` holds no finished job.
    """
    jobs = load_jobs(source)
    if not jobs:
        raise FileNotFoundError(f"{source}: no finished job (a dir with summary.json and records.jsonl)")
    out = Path(out_dir)
    keys = {**DEFAULT_NAMES, **{k: v for k, v in (names or {}).items() if v}}
    written: list[Exported] = []
    for job in jobs:
        name = _safe(dataset or job.choices.get("dataset", "hard518"))
        if not job.is_orig:
            written += export_job(job, out, name, keys)
    orig = export_orig(jobs, out, _safe(dataset or jobs[0].choices.get("dataset", "hard518")), keys)
    return written + ([orig] if orig else [])
