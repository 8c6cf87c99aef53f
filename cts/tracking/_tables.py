"""The records as an MLflow table of the job's run: one row per instance and repeat, in dataset order."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cts.core.types import UNKNOWN
from cts.tracking._batch import pending_tag, set_tags
from cts.tracking._outbox import call
from cts.tracking._store import mlflow_module

RECORDS_TABLE = "records_table.json"
_LOGGED = "mlflow.loggedArtifacts"  # MLflow's tag: the run's tables (and images), as JSON


def _row(r: Any, run_id: str, trace_id: str) -> dict[str, Any]:
    return {
        "instance_id": r.id,
        "run_id": run_id,
        "trace_id": trace_id,
        "k": r.k,
        "mode": r.mode,
        "questions": "\n".join(r.questions),
        "answers": "\n".join(r.answers),
        "n_unknown": sum(a == UNKNOWN for a in r.answers),
        "rewritten_query": r.rewritten_query or "",
        "score": r.score,
        "orig_score": r.orig_score,
        "delta": None if r.score is None or r.orig_score is None else r.score - r.orig_score,
        "clarified_labels": json.dumps(dict(r.clarified.labels) if r.clarified else {}, ensure_ascii=False),
        "orig_labels": json.dumps(dict(r.orig.labels) if r.orig else {}, ensure_ascii=False),
        "error": f"{r.error.stage}: {r.error.kind}" if r.error else "",
        "repeat": r.repeat,  # last: the columns before it are where tables logged without it had them
    }


def log_records_table(
    records: Iterable[Any],
    order: Sequence[str] = (),
    trace_ids: Mapping[str, str] | None = None,
    artifact_file: str = RECORDS_TABLE,
) -> None:
    """Log the records as an MLflow table of the active run (one row per instance and repeat).

    Rows follow ``order`` (the dataset's ids; ids not in it go last, as they come), then the
    repeat, so two runs of one dataset list their instances alike whatever order they finished
    in. Each row names its repeat (``repeat``: 0 without repeats, as in tables logged before the
    column existed), its run (``run_id``) and its per-instance trace (``trace_id``, empty
    without traces). ``mlflow.set_experiment(name)`` then ``mlflow.load_table(artifact_file,
    run_ids=[...])`` lines the same instance (and repeat) up across runs.

    Args:
        records: The job dir's records (any order).
        order: Instance ids in dataset order.
        trace_ids: Instance id -> the id of its trace (with repeats, one trace for all its rows).
    """
    import pandas as pd

    mlflow = mlflow_module()
    run_id = mlflow.active_run().info.run_id
    rank, ids = {i: n for n, i in enumerate(order)}, trace_ids or {}
    # Rows, not records, are sorted: a record's answers and trace summary are dropped as it is read.
    rows = sorted(
        (_row(r, run_id, ids.get(r.id, "")) for r in records),
        key=lambda row: (rank.get(row["instance_id"], len(rank)), row["repeat"]),
    )
    op = {"op": "records_table", "order": list(order), "trace_ids": dict(ids), "file": artifact_file}
    frame = pd.DataFrame(rows, columns=list(_row_columns()))
    call(mlflow.get_tracking_uri(), run_id, op, lambda: _write_table(run_id, frame, artifact_file))


def _write_table(run_id: str, frame: Any, artifact_file: str) -> None:
    """Log ``frame`` as the run's table ``artifact_file``, replacing the one an earlier invocation logged.

    Written as ``mlflow.log_table`` writes it (JSON, ``orient="split"``), with the run's
    ``mlflow.loggedArtifacts`` tag that makes it a table in MLflow's UI. Not through
    ``log_table`` itself: it appends to an existing table (a resumed job logs every record of
    its dir again), and it costs two artifact listings, a per-cell image check and a run read
    besides the write (about 25 ms a job, twice that under a sweep's load).
    """
    mlflow = mlflow_module()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / artifact_file
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_json(path, orient="split", index=False, date_format="iso")
        parent = str(Path(artifact_file).parent)
        mlflow.log_artifact(str(path), artifact_path=None if parent == "." else parent)
    logged = pending_tag(_LOGGED) or mlflow.MlflowClient().get_run(run_id).data.tags.get(_LOGGED, "[]")
    entries = json.loads(logged)
    entry = {"path": artifact_file, "type": "table"}
    if entry not in entries:
        set_tags({_LOGGED: json.dumps([*entries, entry])})


def _row_columns() -> Iterable[str]:
    return (
        "instance_id",
        "run_id",
        "trace_id",
        "k",
        "mode",
        "questions",
        "answers",
        "n_unknown",
        "rewritten_query",
        "score",
        "orig_score",
        "delta",
        "clarified_labels",
        "orig_labels",
        "error",
        "repeat",
    )
