"""The job's dataset in MLflow: a run input with a digest of its content, and an evaluation dataset.

The digest is computed over the instances the job evaluates, in dataset order (never in the
order they finished), with their gold: two runs of one dataset show one digest in the runs'
Dataset column, and the experiment's Datasets tab lists the dataset once per digest.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from cts.tracking._outbox import call, unreachable
from cts.tracking._store import mlflow_module

log = logging.getLogger(__name__)

CONTEXT = "evaluation"
_UNSAFE = re.compile(r"[^\w.-]")  # the name is quoted in a search filter
_CREATING = threading.Lock()  # the jobs of a sweep share a process: one of them creates a dataset
_ENSURED: set[tuple[str, str, str]] = set()
"""(tracking URI, experiment, name) of the evaluation datasets this process found or created:
a sweep's jobs evaluate the same dataset, and each search for it costs a query and its parsing."""
_BUILDING = threading.Lock()
_BUILT: dict[tuple[str, str], Any] = {}
"""(name, digest) -> MLflow's dataset entity of those rows (the digest is of their content). The entity, not
the dataset object: that one holds its frame, a copy of every instance and its gold for the process's life."""


def dataset_rows(instances: Iterable[Any], gold: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per instance, in the order given: its id, both queries and its gold nuggets."""
    return list(_rows(instances, gold))


def _rows(instances: Iterable[Any], gold: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """:func:`dataset_rows`, one at a time: a large dataset's gold is parsed per row, never held (:mod:`cts.gold.file`)."""
    for inst in instances:
        g = gold.get(inst.id)
        nuggets = [{"id": n.id, "text": n.text, "weight": n.weight} for n in (g.nuggets if g else ())]
        yield {
            "instance_id": inst.id,
            "blurred_query": inst.blurred_query,
            "fused_query": inst.fused_query,
            "gold_nuggets": nuggets,
        }


def dataset_digest(rows: Iterable[Mapping[str, Any]]) -> str:
    """A content digest of ``rows`` in their order (16 hex characters of a SHA-256)."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()[:16]


def log_dataset_input(
    name: str, instances: Sequence[Any], gold: Mapping[str, Any], *, evaluation_dataset: bool = True
) -> str:
    """Log the instances a job evaluates as an input of the active run (and an evaluation dataset).

    Args:
        name: The dataset's name (``demo``, ``cts518`` ...).
        instances: The job's instances, in dataset order.
        gold: Instance id -> its gold.
        evaluation_dataset: Also keep the rows as an MLflow evaluation dataset of the run's
            experiment (``<name>-<digest>``, created once per digest; the Datasets tab).

    Returns:
        The digest (see :func:`dataset_digest`).
    """
    mlflow = mlflow_module()

    def rows() -> Iterator[dict[str, Any]]:  # each pass builds its rows again: 20,000 of them are about 50 MB
        return _rows(instances, gold)

    digest = dataset_digest(rows())
    run_id = mlflow.active_run().info.run_id

    def kept() -> dict[str, Any]:  # the call as the outbox keeps it, built only when the store is down
        return {"op": "dataset", "name": name, "rows": list(rows()), "evaluation_dataset": evaluation_dataset}

    call(mlflow.get_tracking_uri(), run_id, kept, lambda: log_dataset_rows(name, rows, evaluation_dataset))
    return digest


def log_dataset_rows(
    name: str,
    rows: Callable[[], Iterable[Mapping[str, Any]]] | Sequence[Mapping[str, Any]],
    evaluation_dataset: bool = True,
) -> None:
    """Log :func:`dataset_rows` (or a function that yields them on each pass) as an input of the active run."""
    mlflow = mlflow_module()
    if not callable(rows):
        rows = (lambda kept: lambda: kept)(rows)
    digest = dataset_digest(rows())
    _log_input(mlflow, _mlflow_dataset(mlflow, name, digest, rows))
    if evaluation_dataset:
        experiment = mlflow.active_run().info.experiment_id
        try:
            ensure_evaluation_dataset(f"{_UNSAFE.sub('_', name)}-{digest[:8]}", digest, rows, experiment)
        except Exception as e:  # noqa: BLE001 - e.g. a tracking server without evaluation datasets: the job goes on
            log.warning("the evaluation dataset %s-%s was not created: %s", name, digest[:8], e)


INPUT_ATTEMPTS = 3


def _mlflow_dataset(mlflow: Any, name: str, digest: str, rows: Callable[[], Iterable[Mapping[str, Any]]]) -> Any:
    """MLflow's dataset entity of ``rows``, built once per name and digest in a process (the jobs of a sweep share it:
    a frame and its schema inferred are about 20 ms a job)."""
    import pandas as pd

    with _BUILDING:
        found = _BUILT.get((name, digest))
        if found is None:
            frame = pd.DataFrame(
                [{**r, "gold_nuggets": json.dumps(r["gold_nuggets"], ensure_ascii=False)} for r in rows()],
                columns=["instance_id", "blurred_query", "fused_query", "gold_nuggets"],
            )
            found = _BUILT[(name, digest)] = mlflow.data.from_pandas(
                frame, name=name, digest=digest
            )._to_mlflow_entity()
        return found


def _log_input(mlflow: Any, dataset: Any) -> None:
    """Link ``dataset`` (an entity) to the active run, as ``mlflow.log_input`` does; a lost race or a failing server warns, never stops the job.

    Jobs that start together on one tracking server (a Slurm array) insert the same dataset
    at once, and MLflow's server answers the loser with a unique-key violation; the next
    attempt finds the dataset and only links it.
    """
    for attempt in range(1, INPUT_ATTEMPTS + 1):
        try:
            tags = [mlflow.entities.InputTag(key="mlflow.data.context", value=CONTEXT)]  # what mlflow.log_input tags
            inputs = [mlflow.entities.DatasetInput(dataset=dataset, tags=tags)]
            mlflow.MlflowClient().log_inputs(run_id=mlflow.active_run().info.run_id, datasets=inputs)
            return
        except Exception as e:  # noqa: BLE001 - the run's input is a view, not a result
            if unreachable(mlflow_module().get_tracking_uri(), e):
                raise  # kept in the job dir (cts.tracking._outbox)
            if attempt == INPUT_ATTEMPTS:
                log.warning("the dataset input %s was not logged: %s", getattr(dataset, "name", "?"), e)
                return
            time.sleep(0.2 * attempt)


def ensure_evaluation_dataset(
    name: str, digest: str, rows: Callable[[], Iterable[Mapping[str, Any]]], experiment: str
) -> None:
    """Create the evaluation dataset ``name`` in ``experiment`` unless it exists (inputs: the query; expectations: gold).

    The records go to MLflow :data:`MERGE_CHUNK` at a time, so that a large dataset is never held whole.
    """
    from mlflow.genai.datasets import create_dataset, search_datasets

    seen = (mlflow_module().get_tracking_uri(), experiment, name)
    with _CREATING:
        if seen in _ENSURED:
            return
        if len(search_datasets(experiment_ids=[experiment], filter_string=f"name = '{name}'", max_results=1)):
            _ENSURED.add(seen)
            return
        dataset = create_dataset(name=name, experiment_id=[experiment], tags={"cts.digest": digest})
        records = (
            {
                "inputs": {"instance_id": r["instance_id"], "blurred_query": r["blurred_query"]},
                "expectations": {"gold_nuggets": r["gold_nuggets"], "fused_query": r["fused_query"]},
            }
            for r in rows()
        )
        while chunk := list(itertools.islice(records, MERGE_CHUNK)):
            dataset.merge_records(chunk)
        _ENSURED.add(seen)


MERGE_CHUNK = 1000
"""Records per ``merge_records`` call of a new evaluation dataset."""
