"""Sweep report: tables recomputed from synthetic job dirs, files and plots written."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cts.core.records import ArmResult, Record
from cts.core.types import UNKNOWN
from cts.report.build import ReportResult, ReportSettings, build_sweep_report, log_sweep_report
from cts.report.cli import main
from cts.report.jobs import job_dirs, load_jobs
from cts.report.rows import score_rows
from cts.stats import Resampling
from tests.report.fakes import IDS, ORIG_SCORES, make_records, write_job

U, K = UNKNOWN, "known"
REGION, SCOPE, TIME = ("region",), ("scope",), ("time",)


def make_sweep(root: Path) -> Path:
    """Three clarifier options x k=1,2 with hand-picked scores and answers."""
    write_job(root, "none", 1, make_records(1, ORIG_SCORES))
    write_job(root, "rules_scope", 1, make_records(1, (20, 20, 40, 40), [SCOPE], [[K], [K], [U], [U]]))
    write_job(root, "rules_region", 1, make_records(1, (10, 20, 30, None), [REGION], [[U], [U], [U], [K]]))
    write_job(
        root, "rules_scope", 2, make_records(2, (30, 30, 40, 50), [SCOPE, TIME], [[K, K], [K, U], [U, U], [U, K]])
    )
    write_job(
        root,
        "rules_region",
        2,
        make_records(2, (10, 30, 30, 40), [REGION, ("region", "time")], [[U, U], [U, K], [U, U], [K, U]]),
    )
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> ReportResult:
    sweep = make_sweep(tmp_path_factory.mktemp("sweep"))
    result = build_sweep_report(sweep, settings=ReportSettings(Resampling(2000)))
    assert result.ok, result.errors
    return result


def row(df: pd.DataFrame, k: int, system: str) -> pd.Series:
    sel = df[(df["k"] == k) & (df["system"] == system)]
    assert len(sel) == 1, (k, system, df)
    return sel.iloc[0]


def test_jobs_are_labelled_by_system_and_orig_is_not_a_system_row(built: ReportResult) -> None:
    scores = built.tables["scores"]
    assert built.n_jobs == 5
    assert list(scores["system"]) == ["orig", "rules_region", "rules_scope", "orig", "rules_region", "rules_scope"]


def test_scores_table_mean_delta_percentiles(built: ReportResult) -> None:
    scores = built.tables["scores"]
    orig = row(scores, 1, "orig")
    assert (orig["n"], orig["mean"], orig["p50"]) == (4, 25.0, 25.0)
    assert orig["p90"] == pytest.approx(np.percentile(ORIG_SCORES, 90))
    scope = row(scores, 1, "rules_scope")
    assert (scope["mean"], scope["delta"], scope["p50"], scope["p90"]) == (30.0, 5.0, 30.0, 40.0)
    region = row(scores, 1, "rules_region")  # the unscored instance is excluded, never 0
    assert (region["n"], region["mean"], region["delta"]) == (3, 20.0, 0.0)
    assert row(scores, 2, "rules_scope")["delta"] == pytest.approx(12.5)


def test_delta_ci_table_recomputed_from_records(built: ReportResult) -> None:
    ci = built.tables["delta_ci"]
    scope = row(ci, 1, "rules_scope")  # differences are 10, 0, 10, 0
    assert scope["n_paired"] == 4
    assert 0.0 <= scope["delta_ci_low"] <= 5.0 <= scope["delta_ci_high"] <= 10.0
    assert scope["delta_ci_low"] < scope["delta_ci_high"]
    region = row(ci, 1, "rules_region")  # identical arms on the 3 paired instances
    assert (region["n_paired"], region["delta_ci_low"], region["delta_ci_high"]) == (3, 0.0, 0.0)


def test_diagnostic_tables(built: ReportResult) -> None:
    t4, t5, t7 = (built.tables[n] for n in ("ua_diagnostics", "region_only", "all_unknown"))
    assert row(t4, 1, "rules_region")[["ua_unknown_rate", "cq_region_rate"]].tolist() == [0.75, 1.0]
    assert row(t4, 1, "rules_scope")[["ua_unknown_rate", "cq_region_rate"]].tolist() == [0.5, 0.0]
    assert row(t5, 1, "rules_region")[["region_only_count", "region_only_unknown_rate"]].tolist() == [4, 0.75]
    assert math.isnan(row(t5, 1, "rules_scope")["region_only_unknown_rate"])
    # k=2 rules_scope: known counts per instance 2, 1, 0, 1
    t7_scope = row(t7, 2, "rules_scope")
    assert t7_scope[["all_unknown_rate", "known_cnt_1", "known_cnt_2"]].tolist() == [0.25, 0.5, 0.25]


def test_turn_level_tables(built: ReportResult) -> None:
    t10, t8 = built.tables["turn_region_only"], built.tables["region_only_range"]
    region2 = t10[(t10["k"] == 2) & (t10["system"] == "rules_region")]
    # turn 1 is region-only (4 questions, 3 unknown); turn 2 is region+time, not region-only
    assert region2[["turn", "region_only_count", "region_only_unknown_rate"]].values.tolist() == [[1, 4, 0.75]]
    assert set(t10["system"]) == {"rules_region"}  # turns without region-only questions are not listed
    assert t8.set_index("k").loc[1, ["min", "max"]].tolist() == [0.75, 0.75]


def test_files_and_plots_written(built: ReportResult) -> None:
    out = built.out_dir
    assert out is not None and out.name == "report"
    names = {p.name for p in built.files}
    for table in (
        "scores",
        "delta_ci",
        "ua_diagnostics",
        "region_only",
        "all_unknown",
        "region_only_range",
        "turn_region_only",
        "qtype_unknown",
    ):
        assert {f"{table}.csv", f"{table}.md", f"{table}.tex"} <= names
    assert {"score_vs_k.png", "unknown_vs_region.png", "report.md"} <= names
    for png in ("score_vs_k.png", "unknown_vs_region.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    md = (out / "scores.md").read_text(encoding="utf-8")
    assert "| 1 | rules_scope | 4 | 30.000 (+5.000) | 30.000 | 40.000 |" in md
    tex = (out / "scores.tex").read_text(encoding="utf-8")
    assert r"\begin{tabular}" in tex and r"rules\_scope" in tex and r"\toprule" in tex
    csv = pd.read_csv(out / "delta_ci.csv")
    assert set(csv["system"]) == {"rules_scope", "rules_region"}
    assert "![score_vs_k](score_vs_k.png)" in (out / "report.md").read_text(encoding="utf-8")


def test_sweep_metrics_are_named_per_system_and_k(built: ReportResult) -> None:
    assert built.metrics["delta_mean.rules_scope.k1"] == 5.0
    assert built.metrics["cq_region_rate.rules_region.k1"] == 1.0
    assert all(math.isfinite(v) for v in built.metrics.values())


def test_varying_factors_join_the_label(tmp_path: Path) -> None:
    recs = make_records(1, ORIG_SCORES)
    write_job(tmp_path / "s", "rules_scope", 1, recs, ua="rules")
    write_job(tmp_path / "t", "rules_scope", 1, recs, ua="gpt")
    jobs = load_jobs([tmp_path / "s", tmp_path / "t"])
    assert [j.label for j in jobs] == ["rules_scope[ua=gpt]", "rules_scope[ua=rules]"]


def test_failure_is_returned_not_raised(tmp_path: Path) -> None:
    result = build_sweep_report(tmp_path / "missing")
    assert not result.ok and "missing" in result.errors[0]
    empty = build_sweep_report(tmp_path)
    assert not empty.ok and "no finished job" in empty.errors[0]
    assert log_sweep_report(empty, "sqlite:///unused.db", "x") is None


def test_cli_writes_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = make_sweep(tmp_path / "sweep")
    assert main([str(sweep), "--out", str(tmp_path / "out"), "--n-resamples", "500"]) == 0
    assert (tmp_path / "out" / "report.md").is_file()
    assert "5 jobs" in capsys.readouterr().out
    assert main([str(tmp_path / "nothing-here")]) == 1


@pytest.mark.slow
def test_report_from_mlflow_experiment_matches_dir_and_is_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cts import tracking

    monkeypatch.chdir(tmp_path)  # MLflow puts artifacts of a new experiment under ./mlruns

    sweep = make_sweep(tmp_path / "sweep")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.prepare_store(uri)
    for job in job_dirs(sweep):
        with tracking.open_mlflow_run(tracking.Experiment(uri, "exp"), job.name, {}, {"cts.kind": "job"}):
            tracking.log_artifacts([job / "records.jsonl", job / "summary.json"])
    (tmp_path / "exp").mkdir()  # a directory named like the experiment does not shadow it
    from_runs = build_sweep_report("exp", tmp_path / "from_runs", uri, settings=ReportSettings(Resampling(500)))
    from_dir = build_sweep_report(sweep, tmp_path / "from_dir", settings=ReportSettings(Resampling(500)))
    assert from_runs.ok, from_runs.errors
    pd.testing.assert_frame_equal(from_runs.tables["scores"], from_dir.tables["scores"])
    run_id = log_sweep_report(from_runs, uri, "exp")
    runs = tracking.search_runs(uri, "exp")
    logged = runs[runs["run_id"] == run_id].iloc[0]
    assert logged["tags.cts.kind"] == "sweep_report"
    assert logged["metrics.delta_mean.rules_scope.k1"] == 5.0


def test_orig_is_pooled_only_within_one_setting(tmp_path: Path) -> None:
    """Jobs that differ in another factor (here the judge) get their own orig row and baseline."""
    from dataclasses import replace

    for judge, shift in (("lexical", 0.0), ("strict", -10.0)):
        root = tmp_path / judge
        for clarifier, records in (
            ("none", make_records(1, ORIG_SCORES)),
            ("rules_scope", make_records(1, (20, 20, 40, 40), [SCOPE], [[K], [K], [U], [U]])),
        ):
            shifted = [replace(r, orig=replace(r.orig, score=r.orig.score + shift)) for r in records]
            write_job(root, clarifier, 1, shifted, judge=judge)
    jobs = load_jobs([tmp_path / "lexical", tmp_path / "strict"])
    scores = score_rows(jobs, Resampling(n_resamples=200))
    origs = scores[scores["system"].str.startswith("orig")].set_index("system")["mean"]
    assert origs.to_dict() == {"orig[judge=lexical]": 25.0, "orig[judge=strict]": 15.0}


def test_a_rebound_clarifier_model_names_the_system_by_its_option_and_orig_is_one_row():
    from cts.report.jobs import job_from_summary, label_jobs

    def job(model: str, litellm_id: str, overrides: list[str]):
        arm = ArmResult(query="q", score=50.0)
        recs = [
            Record(
                id=f"i{n}",
                k=1,
                questions=("Which?",),
                clarified=arm,
                orig=ArmResult(query="q", score=40.0),
                models={"clarifier": litellm_id},
            )
            for n in range(3)
        ]
        choices = {"clarifier": "gpt", "model@clarifier.model": model}  # as Hydra records them
        return job_from_summary({"choices": choices, "k": 1, "overrides": overrides}, recs)

    jobs = label_jobs(
        [
            job("gpt", "openai/gpt-5.2", ["clarifier=gpt", "k=1"]),
            job("claude", "anthropic/claude-opus-4-5", ["clarifier=gpt", "model@clarifier.model=claude", "k=1"]),
        ]
    )
    # The option chosen, as `clarifier=claude` names the same system (not the litellm id the records hold).
    assert sorted(j.label for j in jobs) == ["claude", "gpt"]
    rows = score_rows(jobs, Resampling(n_resamples=200, confidence=0.95, seed=0))
    assert list(rows["system"]).count("orig") == 1 and "claude" in set(rows["system"])


def test_table_3_keeps_the_paired_interval_and_adds_holm_adjusted_p_values(built: ReportResult) -> None:
    from cts.stats.bootstrap import paired_bootstrap_ci
    from cts.stats.multiplicity import holm

    ci = built.tables["delta_ci"]
    scope = row(ci, 1, "rules_scope")  # the interval is the paired bootstrap's, number for number
    assert (scope["delta"], scope["delta_ci_low"], scope["delta_ci_high"]) == paired_bootstrap_ci(
        [20, 20, 40, 40], ORIG_SCORES, Resampling(2000)
    )
    assert list(ci["p_holm"]) == pytest.approx(holm(list(ci["p_value"])))  # one family: all 4 comparisons
    assert row(ci, 1, "rules_region")["p_value"] == 1.0  # every paired difference is 0
    md = (built.out_dir / "delta_ci.md").read_text(encoding="utf-8")
    assert "| p | p (Holm) |" in md and "adjusted over the 4 comparisons with orig" in md
    assert "clusters" not in md  # no job named clusters: the paper's columns, plus the p-values
    assert built.metrics["delta_p_holm.rules_scope.k1"] == pytest.approx(scope["p_holm"])


def clustered_job(root: Path, clarifier: str, scores: Sequence[float], topics: dict[str, str] | None) -> Path:
    """A job dir whose summary names each instance's topic (as a job with dataset.cluster_field writes it)."""
    asked = ([SCOPE], [[K]] * len(IDS)) if clarifier != "none" else ()
    job = write_job(root, clarifier, 1, make_records(1, scores, *asked))
    summary = json.loads((job / "summary.json").read_text(encoding="utf-8"))
    if topics is not None:
        summary["ci"] = {"method": "cluster_bootstrap", "cluster_field": "topic", "clusters": topics}
    (job / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return job


def test_a_clustered_job_resamples_its_clusters_in_table_3(tmp_path: Path) -> None:
    from cts.stats.cluster import cluster_bootstrap_ci

    topics = {"a": "t1", "b": "t1", "c": "t2", "d": "t2"}
    clustered_job(tmp_path, "none", ORIG_SCORES, topics)
    clustered_job(tmp_path, "rules_scope", (20, 25, 35, 40), topics)
    clustered_job(tmp_path, "rules_region", (15, 20, 30, 45), None)
    result = build_sweep_report(tmp_path, settings=ReportSettings(Resampling(1000)))
    assert result.ok, result.errors
    ci = result.tables["delta_ci"]
    scope, region = row(ci, 1, "rules_scope"), row(ci, 1, "rules_region")
    want = cluster_bootstrap_ci([20, 25, 35, 40], ORIG_SCORES, ["t1", "t1", "t2", "t2"], Resampling(n_resamples=1000))
    assert (scope["delta_ci_low"], scope["delta_ci_high"], scope["p_value"]) == (want.low, want.high, want.p_value)
    assert (scope["n_clusters"], scope["cluster_field"]) == (2, "topic")
    assert scope["design_effect"] == pytest.approx(want.design_effect)
    assert math.isnan(region["n_clusters"]) and region["cluster_field"] == ""
    md = (result.out_dir / "delta_ci.md").read_text(encoding="utf-8")
    assert "cluster bootstrap by `topic` (rows with a cluster count)" in md and "| clusters | deff |" in md


def test_the_cli_takes_p_values_from_the_sign_flip_test(tmp_path: Path) -> None:
    from cts.stats.multiplicity import sign_flip_p_value

    sweep = make_sweep(tmp_path / "sweep")
    assert main([str(sweep), "--out", str(tmp_path / "out"), "--n-resamples", "500", "--p-value", "permutation"]) == 0
    ci = pd.read_csv(tmp_path / "out" / "delta_ci.csv")
    scope = row(ci, 2, "rules_scope")  # differences 20, 10, 10, 10: 16 sign vectors, enumerated (16 <= 500)
    assert scope["p_value"] == pytest.approx(sign_flip_p_value([20, 10, 10, 10], n_resamples=500)) == 2 / 16
    assert "sign-flip permutation" in (tmp_path / "out" / "delta_ci.md").read_text(encoding="utf-8")


def test_the_unscored_table_names_the_role_and_kind_that_lost_each_score(tmp_path: Path) -> None:
    from cts.core.records import ErrorInfo

    records = make_records(1, (20, 20, 40, 40), [SCOPE], [[K], [K], [U], [U]])
    records[0] = Record(
        id="a", k=1, questions=("q",), error=ErrorInfo("answer", "truncated", "ua: cut"), orig=records[0].orig
    )
    records[1] = Record(
        id="b",
        k=1,
        clarified=ArmResult("q", error=ErrorInfo("judge", "invalid_output", "no JSON")),
        orig=records[1].orig,
    )
    write_job(tmp_path, "rules_scope", 1, records)
    write_job(tmp_path, "none", 1, make_records(1, ORIG_SCORES))
    result = build_sweep_report(tmp_path, settings=ReportSettings(Resampling(200)))
    assert result.ok, result.errors
    table = row(result.tables["unscored"], 1, "rules_scope")
    # 8 scores (4 instances x 2 arms): a's clarified arm (its UA's reply was cut), b's (its judge's invalid)
    assert table["unscored_rate"] == 2 / 8 and table["unscored_rate_ua_truncated"] == 1 / 8
    assert table["unscored_rate_judge_invalid_output"] == 1 / 8
    shown = [c for c in result.tables["unscored"].columns if c.startswith("unscored_rate")]
    assert shown == ["unscored_rate", "unscored_rate_ua_truncated", "unscored_rate_judge_invalid_output"]
