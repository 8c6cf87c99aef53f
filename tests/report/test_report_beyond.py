"""Sweep-report sections beyond the paper: batch vs sequential, post-hoc gating, cost-quality frontier."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from cts import report
from cts.protocol.pipeline import STAGE_CALLS
from cts.report import ReportSettings
from cts.report.beyond import frontier_rows, pareto
from cts.report.jobs import job_from_summary, label_jobs
from cts.stats import Resampling
from tests.report.fakes import ORIG_SCORES, make_records, write_job

K, U = "known", "unknown"


def sequential(records, asked):
    """The same records as asked sequentially, with fewer questions where it stopped."""
    return [
        replace(
            r, mode="sequential", questions=r.questions[:n], answers=r.answers[:n], question_types=r.question_types[:n]
        )
        for r, n in zip(records, asked)
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> report.ReportResult:
    root = tmp_path_factory.mktemp("sweep")
    batch = make_records(2, (30, 10, 40, 50), [("scope",), ("time",)], [[K, K], [U, U], [U, K], [K, U]])
    seq = sequential(
        make_records(2, (30, 20, 30, 50), [("scope",), ("time",)], [[K, K], [U, U], [U, K], [K, U]]), (1, 2, 2, 1)
    )
    write_job(root / "a", "rules_scope", 2, batch, **{"clarifier.mode": "batch"})
    write_job(root / "b", "rules_scope", 2, seq, **{"clarifier.mode": "sequential"})
    before = dict(STAGE_CALLS)
    result = report.build_sweep_report(root, settings=ReportSettings(Resampling(500)))
    assert result.ok, result.errors
    assert dict(STAGE_CALLS) == before  # the report's gating made no search or judge call
    return result


def test_batch_and_sequential_side_by_side(built: report.ReportResult) -> None:
    t = built.tables["batch_vs_sequential"].set_index("mode")
    assert set(t["system"]) == {"rules_scope"}
    assert t.loc["batch", "questions_asked_mean"] == 2.0 and t.loc["sequential", "questions_asked_mean"] == 1.5
    assert t.loc["batch", "score"] == pytest.approx(32.5) and t.loc["sequential", "score"] == pytest.approx(32.5)
    assert t.loc["sequential", "delta"] == pytest.approx(32.5 - sum(ORIG_SCORES) / 4)
    assert t.loc["batch", "all_unknown_rate"] == 0.25


def test_gating_table_oracle_bound(built: report.ReportResult) -> None:
    g = built.tables["gating"]
    for _mode, rows in g.groupby("mode"):
        by = rows.set_index("gate")
        assert {"always", "never", "oracle", "rules"} <= set(by.index)
        assert by.loc["oracle", "score_mean"] >= max(by.loc["always", "score_mean"], by.loc["never", "score_mean"])
        assert by.loc["never", "ask_rate"] == 0 and by.loc["always", "ask_rate"] == 1
        assert by.loc["oracle", "precision"] == 1.0
    batch = g[(g["mode"] == "batch")].set_index("gate")
    # batch: system 30,10,40,50 vs orig 10,20,30,40 -> oracle asks a, c, d: (30+20+40+50)/4
    assert batch.loc["oracle", "score_mean"] == pytest.approx(35.0)
    assert batch.loc["oracle", "questions_per_instance"] == pytest.approx(1.5)


def test_frontier_table_plots_and_metrics(built: report.ReportResult) -> None:
    f = built.tables["frontier"]
    assert (f[f["gate"] == "oracle"]["pareto"] == False).all()  # noqa: E712 - an upper bound, not a system
    assert f["pareto"].any() and set(f["cost_unit"]) == {"questions"}
    orig = f[f["system"] == "orig"]
    assert len(orig) == 1 and bool(orig["pareto"].iloc[0])  # zero cost: nothing is cheaper
    out = built.out_dir
    assert out is not None
    for name in ("frontier.png", "score_vs_questions.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "![frontier](frontier.png)" in md and "Batch vs. sequential" in md and "Ask-or-not gating" in md
    assert any(k.startswith("gate_score_mean.rules_scope.oracle.k2") for k in built.metrics)
    assert any(k.startswith("questions_asked_mean.rules_scope.sequential") for k in built.metrics)


def test_pareto_and_labels() -> None:
    assert pareto([(0, 10), (1, 20), (2, 15), (1, 20)]) == [True, True, False, True]
    records = make_records(1, (20, 20, 40, 40), [("scope",)], [[K], [K], [U], [U]])

    def job(mode: str, judge: str):
        summary = {
            "choices": {"clarifier": "rules", "judge": judge},
            "k": 1,
            "swept": ["clarifier.mode", "judge"],
            "overrides": [f"clarifier.mode={mode}", f"judge={judge}", "limit=4"],
        }
        return job_from_summary(summary, [replace(r, mode=mode) for r in records])

    jobs = label_jobs([job("sequential", "x"), job("batch", "x"), job("batch", "y")])
    # the mode is a column, never part of a label; the other factors that vary are
    assert [(j.label, j.mode) for j in jobs] == [
        ("rules[judge=x]", "batch"),
        ("rules[judge=x]", "sequential"),
        ("rules[judge=y]", "batch"),
    ]
    mixed = pd.DataFrame(
        {
            "system": ["s", "s"],
            "k": [1, 1],
            "mode": ["batch"] * 2,
            "gate": ["always", "never"],
            "score_mean": [50.0, 40.0],
            "cost_per_instance": [0.01, 0.0],
            "cost_unit": ["usd", "questions"],
            "questions_per_instance": [1.0, 0.0],
        }
    )
    assert set(frontier_rows(mixed)["cost_unit"]) == {"questions"}
