"""Table 3's prediction-powered columns and metrics, from judge scores on every instance and labels on 10%."""

from __future__ import annotations

import math

import pytest

from cts.core.scoring import restore_score
from cts.data.human_labels import HumanLabel
from cts.report.agreement import agreement_of
from cts.report.build import sweep_metrics
from cts.report.ppi import ppi_metrics, ppi_rows, with_ppi
from cts.report.rows import score_rows
from cts.report.tables import delta_ci_table
from cts.stats import Resampling
from cts.stats.ppi import ppi_mean_ci
from tests.agreement.fakes import NUGGETS, sweep

STRICT = {"full": "partial", "partial": "none", "none": "none"}


def human_labels(jobs, ids):  # noqa: ANN001, ANN201 - test data
    """People one level stricter than the judge on n1, on both arms of ``ids``."""
    out = []
    for job, arm in ((jobs[0], "rules_region-k1"), (jobs[1], "rules_scope-k1")):
        for r in job.records:
            if r.id in ids:
                for answer, name in ((r.clarified, arm), (r.orig, "orig")):
                    for n, label in answer.labels.items():
                        out.append(HumanLabel(r.id, name, n, STRICT[label] if n == "n1" else label, "ann"))
    return list(dict.fromkeys(out))


def test_ppi_rows_are_the_published_estimator_on_the_jobs_scores() -> None:
    jobs, weights = sweep(100)
    ids = {f"i{i:03d}" for i in range(0, 100, 10)}  # 10% labelled
    rows = ppi_rows(jobs, agreement_of(jobs, human_labels(jobs, ids), weights), 0.95).set_index("system")
    job = jobs[1]  # rules_scope
    human = {r.id: r.clarified.labels for r in job.records}
    y = [restore_score({n: STRICT[v] if n == "n1" else v for n, v in human[i].items()}, NUGGETS) for i in sorted(ids)]
    f = [r.score for r in job.records if r.id in ids]
    rest = [r.score for r in job.records if r.id not in ids]
    expected = ppi_mean_ci(y, f, rest)
    row = rows.loc["rules_scope"]
    assert row["n_labelled"] == 10 and row["n_labelled_delta"] == 10
    assert (row["score_ppi"], row["score_ppi_low"], row["score_ppi_high"]) == pytest.approx(
        (expected.mean, expected.low, expected.high)
    )
    assert row["score_ppi"] < sum(r.score for r in job.records) / 100  # people are stricter than the judge


def test_table_3_shows_the_ppi_columns_beside_the_judge_only_ones_and_metrics_follow() -> None:
    jobs, weights = sweep(100)
    ids = {f"i{i:03d}" for i in range(0, 100, 10)}
    ppi = ppi_rows(jobs, agreement_of(jobs, human_labels(jobs, ids), weights), 0.95)
    scores = with_ppi(score_rows(jobs, Resampling(200, 0.95, 0)), ppi)
    table = delta_ci_table(scores, 0.95)
    assert list(table.display.columns) == [
        "k", "System", "n", "mean Δ vs. orig", "95% CI", "p", "p (Holm)",
        "mean (judge)", "n labelled", "mean PPI [95% CI]", "Δ PPI [95% CI]",
    ]  # fmt: skip
    assert set(table.display["n labelled"]) == {"10"} and "PPI" in table.caption
    metrics = sweep_metrics(scores, scores.iloc[0:0])
    assert {"score_ppi.rules_scope.k1", "delta_ppi_low.rules_region.k1", "n_labelled.rules_scope.k1"} <= set(metrics)
    per_run = ppi_metrics(ppi)
    assert set(per_run) == {"run-a", "run-b"} and set(per_run["run-a"]) == {
        "n_labelled", "score_ppi", "score_ppi_low", "score_ppi_high", "delta_ppi", "delta_ppi_low", "delta_ppi_high",
    }  # fmt: skip


def test_without_labels_table_3_is_as_before() -> None:
    jobs, _ = sweep(20)
    scores = score_rows(jobs, Resampling(200, 0.95, 0))
    assert with_ppi(scores, None) is scores
    assert "n labelled" not in delta_ci_table(scores, 0.95).display.columns
    assert not any(math.isnan(v) for v in sweep_metrics(scores, scores.iloc[0:0]).values())
