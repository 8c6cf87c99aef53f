"""Clustered delta CIs end to end: the dataset's cluster field, job metrics, summary.json, and a real run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from cts.compose.validate import value_problems
from cts.core.records import ArmResult, Record
from cts.data.clusters import ci_summary, cluster_labels, dataset_clusters, summary_clusters
from cts.data.jsonl import Dataset, DatasetError, read_instances_jsonl, with_clusters
from cts.protocol.metrics import score_metrics, summarize
from cts.stats.cluster import cluster_bootstrap_ci
from cts.tasks.job import protocol_fingerprint

REPO = Path(__file__).resolve().parents[1]
CLUSTERED = REPO / "tests" / "fixtures" / "clustered" / "instances.jsonl"
STATS = {"n_resamples": 2000, "confidence": 0.95, "seed": 0}


def clustered_dataset() -> Dataset:
    return Dataset("clustered", tuple(read_instances_jsonl(CLUSTERED)), {})


def test_the_handwritten_set_has_four_topics_of_three() -> None:
    labels = cluster_labels(clustered_dataset().instances, "topic")
    assert len(labels) == 12 and sorted(set(labels.values())) == ["crane", "orange", "spring", "venus"]
    assert all(list(labels.values()).count(t) == 3 for t in set(labels.values()))


def test_a_missing_cluster_field_is_one_line_naming_the_instances() -> None:
    with pytest.raises(DatasetError) as refused:
        with_clusters(clustered_dataset(), "source")
    assert refused.value.problems == [
        "dataset.cluster_field=source: 12 of 12 instance(s) have no meta['source'] (a non-empty string or an "
        "integer): spring-water, spring-season, spring-device, crane-bird, crane-fly ...; set it on every "
        "instance, or dataset.cluster_field=null"
    ]
    assert with_clusters(clustered_dataset(), "topic").cluster_field == "topic"
    assert dataset_clusters(clustered_dataset()) is None  # no field: instances are independent


def test_the_value_table_refuses_a_cluster_field_that_is_not_a_key() -> None:
    assert value_problems(OmegaConf.create({"dataset": {"cluster_field": 3}})) == [
        "dataset.cluster_field: must be a meta key (a non-empty string) or null (each instance's cluster, "
        "e.g. its topic), got 3"
    ]
    assert value_problems(OmegaConf.create({"dataset": {"cluster_field": None}})) == []


def test_the_cluster_field_does_not_change_the_protocol_fingerprint() -> None:
    # records do not depend on how the CI groups them: a job dir resumes with another cluster field
    cfgs = [OmegaConf.create({"k": 1, "dataset": {"n": 5, "cluster_field": f}}) for f in (None, "topic")]
    assert protocol_fingerprint(cfgs[0]) == protocol_fingerprint(cfgs[1])
    assert protocol_fingerprint(OmegaConf.create({"k": 1, "dataset": {"n": 6}})) != protocol_fingerprint(cfgs[0])


def records(scores: list[float], origs: list[float]) -> list[Record]:
    return [
        Record(id=f"i{n}", k=1, clarified=ArmResult("q", score=s), orig=ArmResult("q", score=o))
        for n, (s, o) in enumerate(zip(scores, origs))
    ]


def test_job_metrics_resample_clusters_and_keep_the_naive_interval() -> None:
    recs = records([60, 70, 65, 10, 20, 15, 40, 45, 50, 90, 80, 85], [10] * 12)
    clusters = {f"i{n}": f"t{n // 3}" for n in range(12)}
    naive = score_metrics(recs, **STATS)
    got = summarize(recs, k=1, clusters=clusters, **STATS)
    want = cluster_bootstrap_ci([r.score for r in recs], [10] * 12, [clusters[r.id] for r in recs], **STATS)
    assert (got["delta_ci_low"], got["delta_ci_high"]) == (want.low, want.high)
    assert (got["delta_ci_naive_low"], got["delta_ci_naive_high"]) == (naive["delta_ci_low"], naive["delta_ci_high"])
    assert got["n_clusters"] == 4 and got["design_effect"] == pytest.approx(want.design_effect)
    assert got["design_effect"] > 2  # topics differ far more than their facets
    assert got["delta_ci_high"] - got["delta_ci_low"] > naive["delta_ci_high"] - naive["delta_ci_low"]


def test_the_clustered_interval_does_not_depend_on_the_order_records_finished_in() -> None:
    scores = [float(x) for x in np.random.default_rng(5).uniform(0, 100, 30)]
    recs = records(scores, [50.0] * 30)
    clusters = {f"i{n}": f"t{n % 10}" for n in range(30)}
    shuffled = [recs[(7 * n + 3) % 30] for n in range(30)]  # records.jsonl is in completion order
    keys = ("delta_ci_low", "delta_ci_high", "n_clusters", "design_effect")
    got, want = (summarize(r, k=1, clusters=clusters, **STATS) for r in (shuffled, recs))
    assert [got[k] for k in keys] == pytest.approx([want[k] for k in keys])


def test_unclustered_job_metrics_are_unchanged() -> None:
    recs = records([60, 70, 65, 10], [10, 20, 30, 40])
    plain = summarize(recs, k=1, **STATS)
    assert plain == summarize(recs, k=1, clusters=None, **STATS)
    assert not {"n_clusters", "design_effect", "delta_ci_naive_low"} & set(plain)
    assert {k: plain[k] for k in ("delta_mean", "delta_ci_low", "delta_ci_high")} == {
        k: score_metrics(recs, **STATS)[k] for k in ("delta_mean", "delta_ci_low", "delta_ci_high")
    }


def test_summary_entry_round_trips() -> None:
    entry = ci_summary("topic", {"a": "t1", "b": "t2", "gone": "t3"}, ["a", "b"])
    assert entry == {
        "ci": {"method": "cluster_bootstrap", "cluster_field": "topic", "clusters": {"a": "t1", "b": "t2"}}
    }
    assert summary_clusters(json.loads(json.dumps(entry))) == ("topic", {"a": "t1", "b": "t2"})
    assert summary_clusters(ci_summary(None, None, ["a"])) == (None, {})
    assert summary_clusters({}) == (None, {})  # a job dir written before clusters existed


def run_py(tmp: Path, cache_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    env.pop("HYDRA_FULL_ERROR", None)
    base = [
        f"paths.cache_dir={cache_dir}",
        f"tracking.uri=sqlite:///{tmp}/mlflow.db",
        f"paths.prompts_dir={REPO}/prompts",
    ]
    return subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args, *base],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_offline_sweep_of_the_handwritten_set_reports_clustered_intervals(tmp_path: Path, cache_dir: Path) -> None:
    gold = run_py(
        tmp_path,
        cache_dir,
        "experiment=gold",
        "search=extractive",
        "extractor=rules",
        f"gold.instances={CLUSTERED}",
        f"gold.out_dir={tmp_path / 'gold'}",
        f"hydra.run.dir={tmp_path}/g",
    )
    assert gold.returncode == 0, gold.stderr[-3000:]
    data = (
        "experiment=offline",
        "dataset=jsonl",
        f"dataset.path={CLUSTERED}",
        f"dataset.gold_path={tmp_path / 'gold' / 'gold.jsonl'}",
    )
    bad = run_py(tmp_path, cache_dir, *data, "dataset.cluster_field=source", f"hydra.run.dir={tmp_path}/bad")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert [line for line in bad.stderr.splitlines() if line.startswith("error: ")] == [
        "error: dataset.cluster_field=source: 12 of 12 instance(s) have no meta['source'] (a non-empty string or "
        "an integer): spring-water, spring-season, spring-device, crane-bird, crane-fly ...; set it on every "
        "instance, or dataset.cluster_field=null"
    ]
    sweep = tmp_path / "sweep"
    done = run_py(
        tmp_path,
        cache_dir,
        "-m",
        *data,
        "dataset.cluster_field=topic",
        "clarifier=rules_scope,rules_region,none",
        "k=1",
        f"hydra.sweep.dir={sweep}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(next(sweep.rglob("clarifier=rules_scope*/summary.json")).read_text())
    assert summary["ci"]["method"] == "cluster_bootstrap" and len(summary["ci"]["clusters"]) == 12
    metrics = summary["metrics"]
    assert metrics["n_clusters"] == 4 and math.isfinite(metrics["design_effect"])
    assert metrics["delta_ci_low"] <= metrics["delta_mean"] <= metrics["delta_ci_high"]
    table_3 = pd.read_csv(sweep / "report" / "delta_ci.csv").set_index("system")  # the report agrees with the job
    assert table_3.loc["rules_scope", ["delta_ci_low", "delta_ci_high"]].tolist() == pytest.approx(
        [metrics["delta_ci_low"], metrics["delta_ci_high"]]
    )
    table = (sweep / "report" / "delta_ci.md").read_text(encoding="utf-8")
    assert "cluster bootstrap by `topic`" in table and "| clusters | deff |" in table and "p (Holm)" in table
