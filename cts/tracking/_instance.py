"""The per-instance hook of a job: each committed instance becomes a trace of its MLflow run.

The job's process only assembles each trace as data (:func:`cts.tracking._tracedoc.trace_document`);
the store writes happen in the trace writer's process (:mod:`cts.tracking._writer`). Trace ids
are derived from the run, the instance and the repeat, so a trace is the same on every resume and
a resumed job writes exactly the traces its earlier invocations did not (:meth:`InstanceTraces.backfill`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cts.tracking._outbox import TRACES_OUTBOX_FILE, job_dir_of
from cts.tracking._store import mlflow_module
from cts.tracking._tracedoc import pending_document, trace_document, trace_id_for
from cts.tracking._tracekeep import OUTBOX_KEY
from cts.tracking._writer import TraceWriter, writer_for

log = logging.getLogger(__name__)

REPEAT_TAG = "cts.repeat"
"""Tag of a trace of a repeat above 0 (the first run of an instance has none, as before repeats existed)."""

Item = tuple[Any, Any, Any, Sequence[Mapping[str, Any]]]
"""``(instance, gold, record, trace lines)`` of one committed instance."""


class InstanceTraces:
    """The per-instance hook of one job (``on_instance``): each committed instance becomes a trace of its run.

    Instances that finish before the job's run exists (a sweep starts them while its jobs set
    up) wait in memory and are submitted by :meth:`attach`; later ones as they commit, from
    whichever thread commits them (the run is named, not taken from the thread).

    Args:
        tags: Tags of every trace (empty values are left out).
        uri: The tracking store: its writer process starts now, so that its start-up overlaps the job's.
    """

    def __init__(self, tags: Mapping[str, str] | None = None, uri: str | None = None) -> None:
        self.tags = dict(tags or {})
        self.trace_ids: dict[str, str] = {}
        """Instance id -> its trace id (this invocation's instances and the backfilled ones)."""
        self._run: tuple[str, str] | None = None
        self._writer: TraceWriter | None = writer_for(uri) if uri else None
        self._waiting: list[dict[str, Any]] = []
        self._submitted: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, instance: Any, gold: Any, record: Any, traces: Sequence[Mapping[str, Any]]) -> None:
        """Submit the instance's trace, or keep it until the run exists (its spans are built by the writer)."""
        doc = pending_document(instance, gold, record, traces, self._tags_for(record))
        with self._lock:
            if self._run is None:
                self._waiting.append(doc)
                return
        self._submit([doc])

    def attach(self, run_id: str, uri: str | None = None) -> None:
        """The job's run exists: submit the instances that waited for it; trace the next ones as they commit.

        Args:
            run_id: The job's MLflow run.
            uri: Its tracking store (default: MLflow's current tracking URI).
        """
        mlflow = mlflow_module()
        uri = uri or mlflow.get_tracking_uri()
        active = mlflow.active_run()  # the job's own run, as a rule: its experiment without a query
        known = active is not None and active.info.run_id == run_id
        run = (run_id, (active if known else mlflow.MlflowClient(uri).get_run(run_id)).info.experiment_id)
        with self._lock:
            if self._writer is None or self._writer.uri != uri:
                self._writer = writer_for(uri)
            self._run = run
            waiting, self._waiting = self._waiting, []
        self._submit(waiting)

    def missing(self, records: Iterable[Any]) -> list[Any]:
        """Of ``records`` (a job dir's, after :meth:`attach`), those whose trace is neither submitted nor stored.

        A job stopped by a signal, or killed, before its traces reached the store still has its
        records on disk: a resumed job passes them here, then their instances to :meth:`backfill`.
        """
        if self._run is None:
            raise RuntimeError("missing() needs the job's run: call attach() first")
        candidates = [r for r in records if self._trace_id(r.id, _repeat(r)) not in self._submitted]
        if not candidates:
            return []
        have = self._stored()
        return [r for r in candidates if (r.id, _repeat(r)) not in have]

    def backfill(self, items: Iterable[Item]) -> int:
        """Submit the traces of instances an earlier invocation committed (see :meth:`missing`); returns how many."""
        docs = [pending_document(i, g, r, lines, self._tags_for(r)) for i, g, r, lines in items]
        self._submit(docs)
        if docs:
            log.info("wrote the traces of %d instances an earlier invocation committed", len(docs))
        return len(docs)

    def flush(self) -> None:
        """Wait until every trace submitted so far is in the store."""
        if self._writer is not None:
            self._writer.flush()

    def _trace_id(self, instance_id: str, repeat: int) -> str:
        assert self._run is not None
        return trace_id_for(self._run[0], instance_id, repeat)

    def _tags_for(self, record: Any) -> dict[str, str]:
        repeat = _repeat(record)
        return {**self.tags, REPEAT_TAG: str(repeat)} if repeat else self.tags

    def _submit(self, docs: list[dict[str, Any]]) -> None:
        assert self._run is not None and self._writer is not None
        run_id, experiment_id = self._run
        job_dir = job_dir_of(run_id)
        outbox = str(job_dir / TRACES_OUTBOX_FILE) if job_dir is not None else None
        fresh = []
        with self._lock:
            for doc in docs:
                trace_id = trace_id_for(run_id, doc["instance_id"], doc["repeat"])
                if trace_id in self._submitted:
                    continue
                self._submitted.add(trace_id)
                self.trace_ids[doc["instance_id"]] = trace_id
                ids = {"trace_id": trace_id, "run_id": run_id, "experiment_id": experiment_id}
                fresh.append({**doc, **ids, OUTBOX_KEY: outbox})
        if fresh:
            self._writer.submit(fresh)

    def _stored(self) -> set[tuple[str, int]]:
        """``(instance id, repeat)`` of the traces the store holds for this run."""
        assert self._run is not None and self._writer is not None
        client = mlflow_module().MlflowClient(self._writer.uri)
        found: set[tuple[str, int]] = set()
        token = None
        while True:
            page = client.search_traces(
                locations=[self._run[1]],
                filter_string=f"metadata.`mlflow.sourceRun` = '{self._run[0]}'",
                max_results=500,
                page_token=token,
                include_spans=False,
            )
            for info in (t.info for t in page):
                if instance := info.tags.get("cts.instance_id"):
                    found.add((instance, int(info.tags.get(REPEAT_TAG, "0"))))
            token = page.token
            if not token:
                return found


def _repeat(record: Any) -> int:
    return int(getattr(record, "repeat", 0) or 0)


def log_instance_trace(
    instance: Any,
    gold: Any,
    record: Any,
    traces: Sequence[Mapping[str, Any]],
    tags: Mapping[str, str] | None = None,
    run: tuple[str, str] | None = None,
) -> str:
    """Write one instance's trace now, from this process (the hook submits to the writer process instead).

    Args:
        run: ``(run id, experiment id)`` the trace belongs to (default: this thread's active run).

    Returns:
        The trace id.
    """
    from mlflow.tracing.client import TracingClient

    from cts.tracking._tracewrite import write_traces

    mlflow = mlflow_module()
    if run is None:
        active = mlflow.active_run()
        run = (active.info.run_id, active.info.experiment_id)
    doc = trace_document(instance, gold, record, traces, tags)
    trace_id = trace_id_for(run[0], doc["instance_id"], doc["repeat"])
    doc.update(trace_id=trace_id, run_id=run[0], experiment_id=run[1])
    _, failures = write_traces(TracingClient(mlflow.get_tracking_uri()), [doc])
    if failures:
        raise RuntimeError(failures[0])
    return trace_id
