"""Results computed after a sweep, logged back onto its finished job runs and their instance traces.

Used by ``python -m cts.agreement``: the judge's agreement with people becomes metrics of each
job run, and the human labels expectations (ground truth, source ``HUMAN``) on each instance's trace.
The review queue tags traces (:data:`REVIEW_TAG`); :func:`human_assessments` reads back the labels
people recorded in MLflow's trace view.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cts.tracking._assessments import Assessed, log_assessments, run_experiments, trace_ids_of_runs, trace_infos
from cts.tracking._store import mlflow_module, prepare_store


def log_to_runs(
    uri: str,
    metrics: Mapping[str, Mapping[str, float]],
    assessments: Iterable[tuple[str, str, Assessed]] = (),
) -> int:
    """Add metrics to finished runs and assessments to their instance traces.

    Args:
        uri: The tracking URI of the runs.
        metrics: Run id -> metrics to add (non-finite values are left out).
        assessments: ``(run id, instance id, assessment)``; logged where the run traced that instance.

    Returns:
        How many assessments were logged (runs logged without traces have none to add to).
    """
    mlflow = mlflow_module()
    prepare_store(uri)
    mlflow.set_tracking_uri(uri)
    from mlflow.entities import Metric

    client = mlflow.MlflowClient(tracking_uri=uri)
    now = int(time.time() * 1000)
    for run_id, values in metrics.items():
        batch = [Metric(k, float(v), now, 0) for k, v in values.items() if math.isfinite(v)]
        if batch:
            client.log_batch(run_id, metrics=batch)
    by_instance: dict[tuple[str, str], list[Assessed]] = {}
    for run_id, instance_id, assessed in assessments:
        by_instance.setdefault((run_id, instance_id), []).append(assessed)
    traces = trace_ids_of_runs([run_id for run_id, _ in by_instance])
    logged = 0
    for key, found in by_instance.items():
        if key in traces:
            log_assessments(traces[key], found)
            logged += len(found)
    return logged


REVIEW_TAG = "cts.review"
"""The tag of a trace in the review queue (``todo``); :data:`REVIEW_ARMS_TAG` names the answers to label."""
REVIEW_ARMS_TAG = "cts.review_arms"


@dataclass(frozen=True)
class StoredAssessment:
    """One HUMAN-source assessment found on an instance trace of a run."""

    trace_id: str
    run_id: str
    instance_id: str
    name: str
    value: Any
    source_id: str
    metadata: Mapping[str, str] = field(default_factory=dict)


def _client(uri: str) -> Any:
    mlflow = mlflow_module()
    prepare_store(uri)
    mlflow.set_tracking_uri(uri)
    return mlflow.MlflowClient(tracking_uri=uri)


def instance_traces(uri: str, run_ids: Sequence[str]) -> dict[tuple[str, str], str]:
    """``(run id, instance id) -> trace id`` of the runs' per-instance traces in the store at ``uri``."""
    _client(uri)
    return trace_ids_of_runs(run_ids)


def tag_traces(uri: str, tags: Mapping[str, Mapping[str, str]]) -> int:
    """Set tags on traces (trace id -> tag -> value); how many traces were tagged."""
    client = _client(uri)
    for trace_id, values in tags.items():
        for key, value in values.items():
            client.set_trace_tag(trace_id, key, value)
    return len(tags)


def queued_traces(uri: str, run_ids: Sequence[str]) -> set[str]:
    """The ids of the runs' traces in the review queue (tagged :data:`REVIEW_TAG` ``todo``)."""
    return {
        info.trace_id
        for experiment, run_id in run_experiments(_client(uri), run_ids)
        for info in trace_infos(experiment, run_id)
        if info.tags.get(REVIEW_TAG) == "todo"
    }


def untag_traces(uri: str, trace_ids: Iterable[str], keys: Sequence[str]) -> int:
    """Remove these tags from traces (a tag a trace lacks is skipped); how many traces."""
    client = _client(uri)
    done = 0
    for trace_id in trace_ids:
        for key in keys:
            with contextlib.suppress(Exception):  # MLflow raises for a tag the trace does not carry
                client.delete_trace_tag(trace_id, key)
        done += 1
    return done


def human_assessments(uri: str, run_ids: Sequence[str]) -> list[StoredAssessment]:
    """Every valid HUMAN-source assessment (feedback or expectation) on the runs' per-instance traces.

    An assessment a later one overrides (an edit in the UI) is not valid, and is left out.
    """
    mlflow = mlflow_module()
    client = _client(uri)
    found: list[StoredAssessment] = []
    for experiment, run_id in run_experiments(client, run_ids):
        traces = mlflow.search_traces(locations=[experiment], run_id=run_id, return_type="list", include_spans=False)
        for t in traces:
            instance = t.info.tags.get("cts.instance_id")
            for a in t.info.assessments or ():
                if instance and a.valid is not False and str(a.source.source_type) == "HUMAN":
                    value = a.feedback.value if a.feedback is not None else getattr(a.expectation, "value", None)
                    found.append(
                        StoredAssessment(
                            t.info.trace_id, run_id, instance, a.name, value, a.source.source_id, dict(a.metadata or {})
                        )
                    )
    return found
