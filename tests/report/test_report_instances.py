"""The report counts what the job counts: instances in one canonical order, repeats reduced first.

Over real offline job dirs (``offline_jobs``): records.jsonl holds the records in the order
they finished, the job's ``summary.json`` its own metrics.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pandas as pd
import pytest

from cts.report import ReportSettings, build_sweep_report, load_jobs
from cts.report.build import ReportResult
from cts.report.gate_evaluation import evaluate_gate
from cts.roles.gates import OracleGate
from cts.stats import Resampling
from tests.runs import OFFLINE_RESAMPLES

N_INSTANCES = 12
CI = ["delta_ci_low", "delta_ci_high"]


def report(source: Path, out: Path) -> ReportResult:
    result = build_sweep_report(source, out, settings=ReportSettings(Resampling(OFFLINE_RESAMPLES, seed=0)))
    assert result.ok, result.errors
    return result


def shuffled(job: Path, dst: Path, seed: int) -> Path:
    """A copy of ``job`` whose records.jsonl lists the records in another order (another schedule)."""
    shutil.copytree(job, dst, ignore=shutil.ignore_patterns("report"))
    path = dst / "records.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    random.Random(seed).shuffle(lines)
    path.write_text("".join(lines), encoding="utf-8")
    return dst


def ids_of(job: Path) -> list[str]:
    return [json.loads(line)["id"] for line in (job / "records.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_table_3_over_shuffled_records_is_the_job_s_own_interval(offline_jobs: dict[int, Path], tmp_path: Path):
    metrics = json.loads((offline_jobs[1] / "summary.json").read_text(encoding="utf-8"))["metrics"]
    rows = []
    for seed in (1, 2):
        job = shuffled(offline_jobs[1], tmp_path / f"shuffled{seed}", seed)
        assert ids_of(job) != sorted(ids_of(job))  # not in dataset (= id) order
        rows.append(report(job, tmp_path / f"report{seed}").tables["delta_ci"].iloc[0])
    for row in rows:
        assert row["n_paired"] == metrics["n_paired"] == N_INSTANCES
        got = (row["delta"], row["delta_ci_low"], row["delta_ci_high"])
        assert got == (metrics["delta_mean"], metrics["delta_ci_low"], metrics["delta_ci_high"])


@pytest.mark.slow
def test_identical_repeats_give_the_n_and_cis_of_one_run(offline_jobs: dict[int, Path], tmp_path: Path):
    one, three = (report(offline_jobs[n], tmp_path / f"repeats{n}").tables for n in (1, 3))
    summary = json.loads((offline_jobs[3] / "summary.json").read_text(encoding="utf-8"))["metrics"]
    assert (summary["n_instances"], summary["n_records"]) == (N_INSTANCES, 3 * N_INSTANCES)
    for name, n in (("delta_ci", "n_paired"), ("gating", "n"), ("batch_vs_sequential", "n")):
        assert set(three[name][n]) == {N_INSTANCES}, name  # instances, not (instance, repeat) records
        pd.testing.assert_frame_equal(three[name][[n, *CI]], one[name][[n, *CI]], check_exact=True, obj=name)
    assert (three["delta_ci"]["delta_ci_low"] == summary["delta_ci_low"]).all()  # the job's interval
    pd.testing.assert_frame_equal(three["gating"], one["gating"], check_exact=True)
    pd.testing.assert_frame_equal(three["frontier"], one["frontier"], check_exact=True)


@pytest.mark.slow
def test_evaluate_gate_decides_once_per_instance(offline_jobs: dict[int, Path]):
    (one,), (three,) = (load_jobs(offline_jobs[n]) for n in (1, 3))
    assert len(three.records) == 3 * N_INSTANCES
    stats1, decisions1 = evaluate_gate(one.records, OracleGate(), Resampling(OFFLINE_RESAMPLES))
    stats3, decisions3 = evaluate_gate(three.records, OracleGate(), Resampling(OFFLINE_RESAMPLES))
    assert stats3.n == len(decisions3) == N_INSTANCES
    assert stats3 == stats1 and decisions3 == decisions1
