"""The dataset's cluster field (dataset.cluster_field): the check on load, the value table, the fingerprint, summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cts.compose.job_config import protocol_fingerprint
from cts.compose.validate import value_problems
from cts.data.clusters import ci_summary, cluster_labels, dataset_clusters, summary_clusters
from cts.data.jsonl import Dataset, DatasetError, read_instances_jsonl, with_clusters

REPO = Path(__file__).resolve().parents[2]
CLUSTERED = REPO / "tests" / "fixtures" / "clustered" / "instances.jsonl"


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


def test_summary_entry_round_trips() -> None:
    entry = ci_summary("topic", {"a": "t1", "b": "t2", "gone": "t3"}, ["a", "b"])
    assert entry == {
        "ci": {"method": "cluster_bootstrap", "cluster_field": "topic", "clusters": {"a": "t1", "b": "t2"}}
    }
    assert summary_clusters(json.loads(json.dumps(entry))) == ("topic", {"a": "t1", "b": "t2"})
    assert summary_clusters(ci_summary(None, None, ["a"])) == (None, {})
    assert summary_clusters({}) == (None, {})  # a job dir written before clusters existed
