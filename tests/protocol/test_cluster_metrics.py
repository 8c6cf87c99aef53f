"""Job metrics of a clustered job: the cluster interval, the naive one beside it; unclustered metrics unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from cts.core.records import ArmResult, Record
from cts.protocol.metrics import score_metrics, summarize
from cts.stats.bootstrap import Resampling
from cts.stats.cluster import cluster_bootstrap_ci

STATS = Resampling(2000, 0.95, 0)


def records(scores: list[float], origs: list[float]) -> list[Record]:
    return [
        Record(id=f"i{n}", k=1, clarified=ArmResult("q", score=s), orig=ArmResult("q", score=o))
        for n, (s, o) in enumerate(zip(scores, origs))
    ]


def test_job_metrics_resample_clusters_and_keep_the_naive_interval() -> None:
    recs = records([60, 70, 65, 10, 20, 15, 40, 45, 50, 90, 80, 85], [10] * 12)
    clusters = {f"i{n}": f"t{n // 3}" for n in range(12)}
    naive = score_metrics(sorted(recs, key=lambda r: r.id), STATS)  # the job resamples instances in id order
    got = summarize(recs, k=1, clusters=clusters, resampling=STATS)
    want = cluster_bootstrap_ci([r.score for r in recs], [10] * 12, [clusters[r.id] for r in recs], STATS)
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
    got, want = (summarize(r, k=1, clusters=clusters, resampling=STATS) for r in (shuffled, recs))
    assert [got[k] for k in keys] == pytest.approx([want[k] for k in keys])


def test_unclustered_job_metrics_are_unchanged() -> None:
    recs = records([60, 70, 65, 10], [10, 20, 30, 40])
    plain = summarize(recs, k=1, resampling=STATS)
    assert plain == summarize(recs, k=1, clusters=None, resampling=STATS)
    assert not {"n_clusters", "design_effect", "delta_ci_naive_low"} & set(plain)
    assert {k: plain[k] for k in ("delta_mean", "delta_ci_low", "delta_ci_high")} == {
        k: score_metrics(recs, STATS)[k] for k in ("delta_mean", "delta_ci_low", "delta_ci_high")
    }
