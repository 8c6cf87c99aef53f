"""A job's run ends: its traces flushed, its status set, or all of it kept in the job dir while the store is down."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from cts.core.errors import TrackingStoreError
from cts.tracking._outbox import FILL_COMMAND, OUTBOX_FILE, call, forget_run, store_down, unsent
from cts.tracking._store import mlflow_module
from cts.tracking._writer import flush_traces

log = logging.getLogger(__name__)


def end_run(uri: str, run_id: str, status: str) -> None:
    """Flush the run's traces and end it with ``status`` (kept as the outbox's last call when the store is down)."""
    mlflow = mlflow_module()
    flush_traces(uri)  # the per-instance traces (cts.tracking._writer) reach the store before the run ends
    if store_down(uri) is None:
        mlflow.flush_trace_async_logging()  # LLM-call spans (services.llm.tracing) reach the store
    op = {"op": "end", "status": status, "end_time": int(time.time() * 1000)}
    try:
        if store_down(uri) is None:
            call(uri, run_id, op, lambda: mlflow.end_run(status=status))  # pops the run, then asks the store
        else:
            call(uri, run_id, op, lambda: None)
            _pop_active_run(run_id)
    finally:
        forget_run(run_id)


def _pop_active_run(run_id: str) -> None:
    """Take the run off this thread's active runs without asking the store (MLflow's end_run would)."""
    from mlflow.tracking import fluent

    stack = fluent._active_run_stack.get()
    if stack and stack[-1].info.run_id == run_id:
        stack.pop()


def refuse_unsent(uri: str, run_id: str, job_dir: Path | None) -> None:
    """Fail a job whose run did not fully reach the store (its records and summary are complete).

    Raises:
        TrackingStoreError: One ``error:`` line: what waits in the job dir, and the command that writes it.
    """
    if job_dir is None:
        return
    calls, traces = unsent(job_dir)
    if not calls and not traces:
        return
    raise TrackingStoreError(
        f"error: tracking: the MLflow store {uri} stopped answering ({store_down(uri) or 'earlier'}): run {run_id} "
        f"lacks {calls} calls (its end among them) and {traces} traces, kept in {job_dir / OUTBOX_FILE}; the job's "
        f"records and summary are complete. Once the store is back: {FILL_COMMAND} {job_dir}"
    )
