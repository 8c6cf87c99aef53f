"""The report's repeats, attribution and variance-by-stage tables, recomputed independently from the records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cts import report
from cts.core.records import ArmResult, Record
from cts.protocol.design import STAGES
from cts.report import ReportSettings
from cts.stats.bootstrap import Resampling, paired_bootstrap_ci
from cts.stats.variance import one_way

N, REPEATS = 40, 4
RESAMPLES = 400


def arm(score: float) -> ArmResult:
    return ArmResult(query="q", score=float(score))


def write(root: Path, name: str, records: list[Record], k: int, **choices: str) -> None:
    job = root / name
    job.mkdir(parents=True)
    (job / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    summary = {"metrics": {}, "choices": {"clarifier": "gpt", **choices}, "k": k, "run_name": name}
    (job / "summary.json").write_text(json.dumps({**summary, "job_dir": str(job), "run_id": ""}), encoding="utf-8")


def repeated_job(rng: np.random.Generator) -> list[Record]:
    """k=2 with every arm: orig, withheld (orig + 2), prefix_1, clarified; noise per repeat."""
    base = rng.normal(40.0, 15.0, N)
    out = []
    for rep in range(REPEATS):
        for i in range(N):
            orig = base[i] + rng.normal(0, 2)
            arms = {
                "oracle": arm(base[i] + 30),
                "withheld": arm(orig + 2),
                "prefix_1": arm(orig + 6 + rng.normal(0, 3)),
            }
            out.append(
                Record(
                    id=f"i{i}",
                    k=2,
                    questions=("a?", "b?"),
                    answers=("x", "y"),
                    clarified=arm(orig + 10 + rng.normal(0, 5)),
                    orig=arm(orig),
                    repeat=rep,
                    arms=arms,
                )
            )
    return out


def stage_job(stage: str, sd: float, rng: np.random.Generator) -> list[Record]:
    base = rng.normal(50.0, 10.0, N)
    return [
        Record(
            id=f"i{i}",
            k=1,
            questions=("a?",),
            answers=("x",),
            clarified=arm(base[i] + rng.normal(0, sd)),
            orig=arm(base[i] - 5),
            repeat=rep,
            resampled=(stage,),
        )
        for rep in range(REPEATS)
        for i in range(N)
    ]


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[report.ReportResult, list[Record], dict[str, list[Record]]]:
    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("sweep")
    full = repeated_job(rng)
    write(root, "full", full, k=2)
    stages = {s: stage_job(s, sd, rng) for s, sd in zip(STAGES, (1.0, 2.0, 3.0, 6.0, 0.5))}
    for s, records in stages.items():
        write(root, f"stage={s}", records, k=1, repeat_stages=s)
    result = report.build_sweep_report(root, settings=ReportSettings(Resampling(RESAMPLES)))
    assert result.ok, result.errors
    return result, full, stages


def instance_mean(records: list[Record], score) -> np.ndarray:
    """Per instance, in id order (the order the reduced records come in), the mean over its repeats."""
    return np.array([np.mean([score(r) for r in records if r.id == i]) for i in sorted({r.id for r in records})])


def test_table_3_and_the_repeats_table_use_instance_means(built):
    result, full, _ = built
    clarified, orig = instance_mean(full, lambda r: r.score), instance_mean(full, lambda r: r.orig_score)
    want = paired_bootstrap_ci(clarified, orig, Resampling(RESAMPLES))
    delta = result.tables["delta_ci"]
    row = delta[delta["k"] == 2].iloc[0]
    assert row["n_paired"] == N and (row["delta"], row["delta_ci_low"], row["delta_ci_high"]) == pytest.approx(want)
    rep = result.tables["repeats"].iloc[0]
    assert (rep["n"], rep["repeats"]) == (N, REPEATS)
    assert (rep["delta_mean"], rep["delta_ci_low"], rep["delta_ci_high"]) == pytest.approx(want)
    sds = [np.std([r.score for r in full if r.id == f"i{i}"], ddof=1) for i in range(N)]
    assert rep["score_within_sd"] == pytest.approx(np.mean(sds))
    groups = [[r.score for r in full if r.id == f"i{i}"] for i in range(N)]
    assert rep["score_icc"] == pytest.approx(one_way(groups).icc)


def test_attribution_table_decomposes_the_delta(built):
    result, full, _ = built
    row = result.tables["attribution"].iloc[0]
    mean = lambda name: instance_mean(full, lambda r: r.arms[name].score)  # noqa: E731
    clarified, orig = instance_mean(full, lambda r: r.score), instance_mean(full, lambda r: r.orig_score)
    assert row["delta_rewrite_mean"] == pytest.approx(2.0)  # withheld = orig + 2 by construction
    assert row["delta_answers_mean"] == pytest.approx(np.mean(clarified - mean("withheld")))
    assert row["delta_rewrite_mean"] + row["delta_answers_mean"] == pytest.approx(row["delta_mean"])
    assert row["delta_oracle_mean"] == pytest.approx(np.mean(mean("oracle") - orig))
    assert row["marginal_q1_mean"] == pytest.approx(np.mean(mean("prefix_1") - orig))
    assert row["marginal_q1_mean"] + row["marginal_q2_mean"] == pytest.approx(row["delta_mean"])
    display = (Path(result.out_dir) / "attribution.md").read_text()
    assert "rewrite (withheld−orig)" in display and "+2.000 [+2.000, +2.000]" in display


def test_stage_variance_table_gives_each_stage_its_share(built):
    result, _, stages = built
    t = result.tables["stage_variance"].set_index("stage")
    assert list(t.index) == [*STAGES, "instances (rest)"]
    parts = {s: one_way([[r.score for r in recs if r.id == f"i{i}"] for i in range(N)]) for s, recs in stages.items()}
    total = np.mean([c.total for c in parts.values()])
    for s, c in parts.items():
        assert t.loc[s, "variance"] == pytest.approx(c.within)
        assert t.loc[s, "share"] == pytest.approx(c.within / total)
    assert t.loc["search", "variance"] > t.loc["rewriter", "variance"] > t.loc["judge", "variance"]
    assert t["share"].sum() == pytest.approx(1.0)


def test_a_report_of_plain_jobs_has_none_of_these_tables(tmp_path):
    rec = [
        Record(id=f"i{i}", k=1, questions=("a?",), answers=("x",), clarified=arm(50 + i), orig=arm(40))
        for i in range(5)
    ]
    write(tmp_path, "plain", rec, k=1)
    result = report.build_sweep_report(tmp_path, settings=ReportSettings(Resampling(100)))
    assert result.ok and not {"repeats", "attribution", "stage_variance"} & set(result.tables)


def test_pass_hat_k_and_flip_rates_count_subsets_of_repeats(built):
    """pass^j by enumerating every j-subset of an instance's repeats; flip rate by every pair."""
    import itertools

    result, full, _ = built
    rep = result.tables["repeats"].iloc[0]
    passes = {i: [r.score >= 50.0 for r in full if r.id == i] for i in sorted({r.id for r in full})}
    for j in range(1, REPEATS + 1):
        want = np.mean([np.mean([all(s) for s in itertools.combinations(p, j)]) for p in passes.values()])
        assert rep[f"pass_hat_{j}"] == pytest.approx(want), j
    assert rep["pass_hat_1"] == pytest.approx(np.mean([r.score >= 50.0 for r in full]))
    flips = {i: np.mean([a != b for a, b in itertools.combinations(p, 2)]) for i, p in passes.items()}
    assert rep["flip_rate"] == pytest.approx(np.mean(list(flips.values())))
    flaky = {i for i, p in passes.items() if any(p) and not all(p)}
    assert 0 < len(flaky) < N and rep["flaky_rate"] == pytest.approx(len(flaky) / N)
    table = result.tables["repeat_flips"]
    assert set(table["instance"]) == flaky
    assert dict(zip(table["instance"], table["flip_rate"])) == pytest.approx({i: flips[i] for i in flaky})
    shown = (Path(result.out_dir) / "repeats.md").read_text()
    assert f"pass^{REPEATS}" in shown and "flip rate" in shown


def test_the_pass_threshold_is_the_reports_to_choose(built, tmp_path):
    result, full, _ = built
    strict = report.build_sweep_report(
        Path(result.source), tmp_path, settings=ReportSettings(Resampling(50), pass_threshold=90.0)
    )
    rep = strict.tables["repeats"].iloc[0]
    assert rep["pass_hat_1"] == pytest.approx(np.mean([r.score >= 90.0 for r in full]))
