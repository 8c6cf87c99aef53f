"""Clusters of a dataset's instances (``dataset.cluster_field``): a meta key such as a topic or source id.

Instances that share a cluster (the facets of one topic, the questions of one passage) are
not independent; the paired interval against orig then resamples whole clusters
(:mod:`cts.stats.cluster`). The field is checked when the dataset is loaded, which the
start-up checks do before anything is created (:func:`cts.compose.app.preload_inputs`): :func:`cts.data.jsonl.with_clusters`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cts.core.types import Instance

__all__ = [
    "CI_KEY",
    "ci_summary",
    "cluster_labels",
    "cluster_problem",
    "dataset_clusters",
    "summary_clusters",
]

_LABEL_TYPES = (str, int)


def _label(instance: Instance, field: str) -> str | None:
    """The instance's cluster label (integers as text), or None when it has none usable."""
    value = instance.meta.get(field)
    if isinstance(value, bool) or not isinstance(value, _LABEL_TYPES) or not str(value).strip():
        return None
    return str(value)


def cluster_problem(instances: Sequence[Instance], field: str) -> str | None:
    """One line saying which instances lack a usable ``meta[field]`` (a non-empty string or an integer), or None."""
    bad = [i.id for i in instances if _label(i, field) is None]
    if not bad:
        return None
    some = ", ".join(bad[:5]) + (" ..." if len(bad) > 5 else "")
    return (
        f"dataset.cluster_field={field}: {len(bad)} of {len(instances)} instance(s) have no meta[{field!r}] "
        f"(a non-empty string or an integer): {some}; set it on every instance, or dataset.cluster_field=null"
    )


def cluster_labels(instances: Sequence[Instance], field: str) -> dict[str, str]:
    """Instance id -> cluster label (instances without one are left out; see :func:`cluster_problem`)."""
    return {i.id: label for i in instances if (label := _label(i, field)) is not None}


def dataset_clusters(dataset: Any) -> Mapping[str, str] | None:
    """Instance id -> cluster of a dataset with a ``cluster_field``; None for one without (instances independent)."""
    field = getattr(dataset, "cluster_field", None)
    return None if field is None else cluster_labels(dataset.instances, field)


CI_KEY = "ci"
"""The ``summary.json`` key that says how a job's delta CI was computed (and, when clustered, the clusters)."""


def ci_summary(field: str | None, clusters: Mapping[str, str] | None, ids: Sequence[str]) -> dict[str, Any]:
    """``summary.json``'s ``ci`` entry: the method, and when clustered the field and each of ``ids``' cluster."""
    if field is None or clusters is None:
        return {CI_KEY: {"method": "paired_bootstrap"}}
    of = {i: clusters[i] for i in ids if i in clusters}
    return {CI_KEY: {"method": "cluster_bootstrap", "cluster_field": field, "clusters": of}}


def summary_clusters(summary: Mapping[str, Any]) -> tuple[str | None, dict[str, str]]:
    """``(cluster field, id -> cluster)`` of a ``summary.json`` (``(None, {})`` for an unclustered or older job)."""
    ci = summary.get(CI_KEY)
    if not isinstance(ci, Mapping) or ci.get("method") != "cluster_bootstrap":
        return None, {}
    return str(ci.get("cluster_field")), {str(k): str(v) for k, v in (ci.get("clusters") or {}).items()}
