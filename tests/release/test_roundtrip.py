"""Export a cts job in the release's layout, read it back, and score it again with ``task=score_answers``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cts import tracking
from cts.core.records import read_records
from cts.release.cli import main
from cts.release.outputs import scan_outputs
from tests.runs import OFFLINE_RESAMPLES, run_py


def test_export_then_read_back_gives_the_same_ids_and_answers(offline_jobs: dict[int, Path], tmp_path: Path) -> None:
    job = offline_jobs[1]
    assert main(["export", str(job), "--out", str(tmp_path / "out")]) == 0
    records = sorted(read_records(job / "records.jsonl"), key=lambda r: r.id)
    cand = scan_outputs(tmp_path / "out" / "candidates" / "rules_scopek1__cand_demo.jsonl", "candidates")
    orig = scan_outputs(tmp_path / "out" / "candidates" / "orig__cand_demo.jsonl", "candidates")
    clar = scan_outputs(tmp_path / "out" / "clarify_only" / "rules_scopek1__clarify_demo.jsonl", "clarify_only")
    assert not cand.problems and not orig.problems and not clar.problems
    assert [(r.id, r.answer) for r in cand.rows] == [(r.id, r.clarified.answer) for r in records if r.clarified]
    assert [(r.id, r.answer) for r in orig.rows] == [(r.id, r.orig.answer) for r in records if r.orig]
    assert [(r.id, r.questions, r.answers, r.query) for r in clar.rows] == [
        (r.id, r.questions, r.answers, r.rewritten_query) for r in records
    ]


@pytest.mark.slow
def test_score_answers_reproduces_the_jobs_own_scores(
    offline_jobs: dict[int, Path], tmp_path: Path, cache_dir: Path
) -> None:
    job = offline_jobs[1]
    out = tmp_path / "export"
    assert main(["export", str(job), "--out", str(out)]) == 0
    scored = tmp_path / "scored"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_py(
        "task=score_answers",
        "dataset=demo",
        f"answers={out / 'candidates' / 'rules_scopek1__cand_demo.jsonl'}",
        f"orig_answers={out / 'candidates' / 'orig__cand_demo.jsonl'}",
        "judge=lexical",
        f"hydra.run.dir={scored}",
        f"tracking.uri={uri}",
        f"paths.cache_dir={cache_dir}",
        f"bootstrap.n_resamples={OFFLINE_RESAMPLES}",
        cwd=tmp_path,
    )
    before = {
        r.id: (r.score, r.orig_score, dict(r.clarified.labels))
        for r in read_records(job / "records.jsonl")
        if r.clarified
    }
    after = {
        r.id: (r.score, r.orig_score, dict(r.clarified.labels))
        for r in read_records(scored / "records.jsonl")
        if r.clarified
    }
    assert after == before and len(after) == 12  # per instance: both arms' scores and the labels
    assert len({s for s, _, _ in after.values()}) > 1  # not a constant: the identity says something
    mine, theirs = (json.loads((d / "summary.json").read_text())["metrics"] for d in (scored, job))
    for metric in ("score_mean", "orig_score_mean", "delta_mean", "delta_ci_low", "delta_ci_high", "n_paired"):
        assert mine[metric] == pytest.approx(theirs[metric]), metric
    runs = tracking.search_runs(uri)
    assert (
        len(runs) == 1 and runs["status"].iloc[0] == "FINISHED" and runs["tags.cts.source"].iloc[0] == "score_answers"
    )
    assert len(tracking.search_traces(uri, "cts")) == 12  # a trace per instance
