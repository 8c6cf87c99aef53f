"""Results computed after a sweep, logged back onto its finished job runs and their instance traces.

Used by ``python -m cts.agreement``: the judge's agreement with people becomes metrics of each
job run, and the human labels expectations (ground truth, source ``HUMAN``) on each instance's trace.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping

from cts.tracking._assessments import Assessed, log_assessments, trace_ids_of_runs
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
