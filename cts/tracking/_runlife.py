"""A job's run while its store may be down: started in the job dir alone, ended, or refused at its end.

A run that cannot start because its tracking server does not answer starts *kept*: an id of its own,
active in this thread as MLflow's runs are, so the job's code runs as usual, and its start is the first
call in the job dir's outbox (``python -m cts.tracking.fill`` creates the run and writes the rest).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cts.core.errors import TrackingStoreError
from cts.tracking._outbox import FILL_COMMAND, OUTBOX_FILE, call, forget_run, keep, register_run, store_down, unsent
from cts.tracking._store import mlflow_module
from cts.tracking._writer import flush_traces

log = logging.getLogger(__name__)


def kept_run(experiment: str, run_name: str, tags: Mapping[str, str], kind: str | None, job_dir: Path | None) -> Any:
    """Start a run in ``job_dir`` alone (its store is down): active in this thread, its start kept first.

    Returns:
        MLflow's ``Run`` of it, with an id of its own and no experiment id yet.
    """
    from mlflow.entities import Run, RunData, RunInfo
    from mlflow.tracking import fluent

    run_id, now = uuid.uuid4().hex, int(time.time() * 1000)
    register_run(run_id, job_dir)
    start = {"op": "start", "experiment": experiment, "run_name": run_name, "tags": dict(tags), "kind": kind}
    keep(run_id, {**start, "start_time": now})
    run = Run(RunInfo(run_id, "", "", "RUNNING", now, None, "active", run_name=run_name), RunData())
    fluent._active_run_stack.get().append(run)  # what mlflow.start_run does once the store has made the run
    return run


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
            pop_active_run(run_id)
    finally:
        forget_run(run_id)


def pop_active_run(run_id: str) -> None:
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


def unrecorded_run(uri: str, experiment: str, tags: Mapping[str, str]) -> str | None:
    """The run a job killed between starting it and storing its id left ``RUNNING`` (None: none, or not one).

    Only one process runs in a job dir (its lock), so a ``RUNNING`` run tagged with the job dir
    and unknown to it is the killed process's, and the resumed job continues it.
    """
    job_dir = tags.get("cts.job_dir")
    exp = mlflow_module().get_experiment_by_name(experiment)
    if not job_dir or "'" in job_dir or exp is None:
        return None
    found = (
        mlflow_module()
        .MlflowClient(tracking_uri=uri)
        .search_runs(
            [exp.experiment_id], f"tags.`cts.job_dir` = '{job_dir}' and attributes.status = 'RUNNING'", max_results=2
        )
    )
    return found[0].info.run_id if len(found) == 1 else None
