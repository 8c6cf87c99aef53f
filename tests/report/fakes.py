"""Shared by several test modules (moved out of test_report.py: no test module imports another)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from cts.core.records import ArmResult, Record

IDS = ("a", "b", "c", "d")


ORIG_SCORES = (10.0, 20.0, 30.0, 40.0)


def make_records(
    k: int,
    scores: Sequence[float | None],
    types: Sequence[tuple[str, ...]] = (),
    answers: Sequence[Sequence[str]] = (),
) -> list[Record]:
    """One record per id; ``types``/``answers`` give every record the same questions."""
    out = []
    for i, (rid, score) in enumerate(zip(IDS, scores)):
        qs = tuple(f"question {t} of {rid}" for t in range(1, len(types) + 1))
        out.append(
            Record(
                id=rid,
                k=k,
                questions=qs,
                question_types=tuple(types),
                answers=tuple(answers[i]) if answers else (),
                rewritten_query=f"rewrite {rid}",
                clarified=ArmResult(query=f"q {rid}", answer="x", score=score),
                orig=ArmResult(query=f"q {rid}", answer="y", score=ORIG_SCORES[i]),
            )
        )
    return out


def write_job(root: Path, clarifier: str, k: int, records: Sequence[Record], **choices: str) -> Path:
    """A job dir as the pipeline writes it: records.jsonl + summary.json."""
    job = root / f"clarifier={clarifier},k={k}"
    job.mkdir(parents=True)
    (job / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    summary = {
        "metrics": {},
        "choices": {"clarifier": clarifier, "judge": "lexical", **choices, "hydra/launcher": "basic"},
        "k": k,
        "run_name": f"clarifier={clarifier},k={k}",
        "job_dir": str(job),
        "run_id": "",
    }
    (job / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return job
