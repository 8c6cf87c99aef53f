"""A job's last metrics and tags in one store write instead of one per call.

Each ``mlflow.log_metrics`` or ``mlflow.set_tags`` is a transaction of its own (on SQLite a commit,
on a tracking server a request). A job's end logs its summary metrics, the unscored rates, the
stop reason, the prompts' versions, the request audit's tags and the records table's
``mlflow.loggedArtifacts`` tag: six writes. Inside :func:`deferred_run_data` they gather in the
calling context (the job's thread) and go out as one ``log_batch`` when the block ends without an
error (chunked to MLflow's per-batch limits). A value logged twice keeps its last value, as the
separate calls did.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from cts.tracking._outbox import call
from cts.tracking._store import mlflow_module

_METRICS_PER_BATCH = 900  # MLflow's log_batch limits (mlflow.utils.validation): 100 tags, 1000 entities
_TAGS_PER_BATCH = 100


@dataclass
class _Pending:
    run_id: str
    metrics: dict[str, tuple[float, int]] = field(default_factory=dict)  # key -> (value, timestamp ms)
    tags: dict[str, str] = field(default_factory=dict)
    open: bool = True  # a task that copied the context and logs after the block: straight to the store


_PENDING: contextvars.ContextVar[_Pending | None] = contextvars.ContextVar("cts_tracking_pending", default=None)


@contextlib.contextmanager
def deferred_run_data() -> Iterator[None]:
    """Gather the active run's metrics and tags logged inside; write them in one batch at the end.

    Nothing is written when the block raises: what a failed job's end logged half-way is not
    worth a store write the failure may share (its run still ends ``FAILED``).
    """
    pending = _Pending(mlflow_module().active_run().info.run_id)
    token = _PENDING.set(pending)
    try:
        yield
    finally:
        _PENDING.reset(token)
        pending.open = False
    _write(pending)


def log_metrics(metrics: Mapping[str, float]) -> None:
    """Log metrics to the active run, or to the batch of :func:`deferred_run_data`."""
    pending = _open_batch()
    now = int(time.time() * 1000)
    if pending is None:
        _write(_Pending(mlflow_module().active_run().info.run_id, {k: (float(v), now) for k, v in metrics.items()}))
        return
    pending.metrics.update({k: (float(v), now) for k, v in metrics.items()})


def set_tags(tags: Mapping[str, str]) -> None:
    """Set tags on the active run, or in the batch of :func:`deferred_run_data`."""
    pending = _open_batch()
    if pending is None:
        _write(_Pending(mlflow_module().active_run().info.run_id, tags={k: str(v) for k, v in tags.items()}))
        return
    pending.tags.update({k: str(v) for k, v in tags.items()})


def pending_tag(key: str) -> str | None:
    """A tag set inside the current :func:`deferred_run_data` block and not written yet (None otherwise)."""
    pending = _open_batch()
    return None if pending is None else pending.tags.get(key)


def _open_batch() -> _Pending | None:
    """The batch of the :func:`deferred_run_data` block this context is in (None outside one, or after it)."""
    pending = _PENDING.get()
    return pending if pending is not None and pending.open else None


def _write(pending: _Pending) -> None:
    """Write the batch (kept in the job dir, for ``python -m cts.tracking.fill``, while the store is down)."""
    if not pending.metrics and not pending.tags:
        return
    op = {"op": "batch", "metrics": pending.metrics, "tags": pending.tags}
    uri = mlflow_module().get_tracking_uri()
    call(uri, pending.run_id, op, lambda: write_batch(pending.run_id, pending.metrics, pending.tags))


def write_batch(run_id: str, metrics_at: Mapping[str, tuple[float, int]], tags_of: Mapping[str, str]) -> None:
    """Log metrics (``key -> (value, timestamp ms)``) and tags to ``run_id`` in as few ``log_batch`` calls as allowed."""
    from mlflow.entities import Metric, RunTag

    metrics = [Metric(k, v, t, 0) for k, (v, t) in metrics_at.items()]
    tags = [RunTag(k, v) for k, v in tags_of.items()]
    client = mlflow_module().MlflowClient()
    while metrics or tags:
        client.log_batch(run_id, metrics=metrics[:_METRICS_PER_BATCH], tags=tags[:_TAGS_PER_BATCH])
        metrics, tags = metrics[_METRICS_PER_BATCH:], tags[_TAGS_PER_BATCH:]
