"""``python -m cts.tracking.fill <job or sweep dir> ...``: write what a tracking server missed while it was down.

A job whose tracking server stopped answering kept the run's calls and traces in its dir
(:mod:`cts.tracking._outbox`). Once the server is back, this writes them, in the order the job
made them, into the run the job dir names (``mlflow_run.json``): params, the dataset input,
metrics and tags, artifacts, the records table, the traces with their assessments, and the run's
end (status and time). No LLM is called. A job dir whose outbox was written loses it; one that
fails keeps it, and the command can be run again (nothing is written twice).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from cts.core.errors import TrackingStoreError, run_cli
from cts.core.records import read_records
from cts.tracking._outbox import FILL_COMMAND, OUTBOX_FILE, TRACES_OUTBOX_FILE, store_down, unsent
from cts.tracking._runlife import pop_active_run
from cts.tracking._store import mlflow_module, prepare_store
from cts.tracking._tracekeep import kept_document

log = logging.getLogger(__name__)

RUN_FILE = "mlflow_run.json"  # the job dir's run (cts.tracking.RUN_FILE)
RECORDS = "records.jsonl"  # the job dir's records (cts.protocol.job_files.RECORDS_FILE)
SUMMARY = "summary.json"  # the job's summary (cts.tasks.job.write_summary)


def job_dirs(roots: Sequence[Path]) -> list[Path]:
    """The job dirs under ``roots`` (each a job or sweep dir) whose outbox holds anything."""
    found: set[Path] = set()
    for root in roots:
        for name in (OUTBOX_FILE, TRACES_OUTBOX_FILE):
            found.update(p.parent for p in [root / name, *root.rglob(name)] if p.is_file())
    return sorted(found)


def read_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file (a torn last line, from a killed job, is skipped)."""
    if not path.is_file():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            continue


def fill_job(job_dir: Path) -> str:
    """Write ``job_dir``'s outbox into its run; returns one line saying what was written.

    Raises:
        TrackingStoreError: The store cannot be opened, or stopped answering while this wrote.
    """
    ref = json.loads((job_dir / RUN_FILE).read_text(encoding="utf-8"))
    uri, run_id = str(ref["tracking_uri"]), str(ref["run_id"])
    prepare_store(uri)
    mlflow_module().set_tracking_uri(uri)  # a trace's spans may be read through the server's artifacts
    ops = list(read_lines(job_dir / OUTBOX_FILE))
    docs = [kept_document(line) for line in read_lines(job_dir / TRACES_OUTBOX_FILE)]
    if ops and ops[0]["op"] == "start":  # the job ran while the store was down: its run is made now, once
        run_id = create_run(uri, ops.pop(0), job_dir)
        write_lines(job_dir / OUTBOX_FILE, ops)
    experiment_id = mlflow_module().MlflowClient(uri).get_run(run_id).info.experiment_id
    docs = [{**d, "run_id": run_id, "experiment_id": experiment_id} for d in docs]  # a kept run's had none
    traces = write_kept_traces(uri, docs)
    replay(uri, run_id, job_dir, ops)
    if (why := store_down(uri)) is not None:
        raise TrackingStoreError(f"error: tracking fill: the store {uri} stopped answering ({why}); run it again")
    for name in (OUTBOX_FILE, TRACES_OUTBOX_FILE):
        (job_dir / name).unlink(missing_ok=True)
    return f"{job_dir}: run {run_id}: {len(ops)} calls and {traces} traces written to {uri}"


def create_run(uri: str, start: Mapping[str, Any], job_dir: Path) -> str:
    """Create the run a job started while its store was down; the job dir names it from now on (its id)."""
    from cts import tracking

    mlflow = mlflow_module()
    mlflow.set_tracking_uri(uri)
    tracking._ensure_experiment(uri, start["experiment"], start.get("kind"))
    experiment_id = str(mlflow.get_experiment_by_name(start["experiment"]).experiment_id)
    tags = {**start["tags"], "mlflow.runName": start["run_name"]}
    run = mlflow.MlflowClient(uri).create_run(experiment_id, int(start["start_time"]), tags, start["run_name"])
    run_id = run.info.run_id
    _rewrite(job_dir / RUN_FILE, {"tracking_uri": uri, "run_id": run_id})
    if (job_dir / SUMMARY).is_file():  # summary.json names the run the report and a resume read
        _rewrite(job_dir / SUMMARY, {"run_id": run_id})
    return run_id


def write_lines(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Replace a JSON-lines file with ``rows`` (atomically)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


def _rewrite(path: Path, values: Mapping[str, Any]) -> None:
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({**data, **values}, indent=2, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)


def fill_earlier(uri: str, job_dir: Path | None) -> None:
    """Write what an earlier invocation of the job kept while its store was down, before this one's run starts.

    So a job resumed before ``python -m cts.tracking.fill`` continues the run the fill makes (a kept run's
    own id names no run in the store), and the earlier data lands before the new. A fill that fails
    leaves the outbox for the command, and the job goes on.
    """
    if job_dir is None or unsent(job_dir) == (0, 0) or store_down(uri) is not None:
        return
    try:
        log.info("%s", fill_job(job_dir))
    except Exception as e:  # noqa: BLE001 - the job's own work matters more; the outbox is kept
        log.warning("what %s kept for the store was not written (%s); later: %s %s", job_dir, e, FILL_COMMAND, job_dir)


def write_kept_traces(uri: str, docs: list[dict[str, Any]]) -> int:
    """Write kept trace documents (those the store already holds are skipped); returns how many were kept."""
    from mlflow.tracing.client import TracingClient

    from cts.tracking._tracewrite import BATCH, write_traces

    client = TracingClient(uri)
    for start in range(0, len(docs), BATCH):
        _, failures = write_traces(client, docs[start : start + BATCH])
        if failures:
            raise TrackingStoreError(f"error: tracking fill: {len(failures)} traces not written: {failures[0]}")
    for doc in docs:
        add_missing_spans(client, doc)
    return len(docs)


def add_missing_spans(client: Any, doc: Mapping[str, Any]) -> None:
    """Write the spans of a trace the store holds without them (the server died between the two writes)."""
    from cts.tracking._tracewrite import mlflow_trace

    try:
        held = client.get_trace(doc["trace_id"])
    except Exception:  # noqa: BLE001 - its data could not be read: written again below
        held = None
    if held is None or not held.data.spans:
        client.log_spans(str(doc["experiment_id"]), mlflow_trace(doc).data.spans)


def replay(uri: str, run_id: str, job_dir: Path, ops: Sequence[Mapping[str, Any]]) -> None:
    """Make each kept call again on the run, active for the block; end it as the job ended it."""
    mlflow = mlflow_module()
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    before = client.get_run(run_id).info
    end = next((op for op in ops if op["op"] == "end"), None)
    mlflow.start_run(run_id=run_id)
    try:
        for op in ops:
            if op["op"] != "end":
                replay_one(op, run_id, job_dir)
    finally:
        pop_active_run(run_id)
    status = str(end["status"]) if end else before.status  # a job killed outright kept no end
    client.set_terminated(run_id, status, end_time=int(end["end_time"]) if end else before.end_time)


def replay_one(op: Mapping[str, Any], run_id: str, job_dir: Path) -> None:
    """One kept call, on the active run (the functions the job called, with the arguments it gave)."""
    from cts import tracking
    from cts.tracking._batch import write_batch
    from cts.tracking._datasets import log_dataset_rows

    mlflow, kind = mlflow_module(), op["op"]
    if kind == "params":
        have = mlflow.MlflowClient().get_run(run_id).data.params
        mlflow.log_params({k: v for k, v in op["params"].items() if k not in have})
    elif kind == "versions":
        mlflow.log_dict(op["versions"], "versions.json")
    elif kind == "batch":
        write_batch(run_id, {k: (float(v), int(t)) for k, (v, t) in op["metrics"].items()}, op["tags"])
    elif kind == "artifacts":
        tracking.log_artifacts([Path(p) for p in op["paths"]], op["artifact_path"])
    elif kind == "records_table":
        records = list(read_records(job_dir / RECORDS))
        tracking.log_records_table(records, op["order"], op["trace_ids"], op["file"])
    elif kind == "dataset":
        log_dataset_rows(op["name"], op["rows"], op["evaluation_dataset"])
    else:
        log.warning("%s: a kept call of an unknown kind (%s) was skipped", job_dir, kind)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cts.tracking.fill <job or sweep dir> ...`` (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m cts.tracking.fill", description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="job dirs, or sweep dirs holding them")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    found = job_dirs(args.dirs)
    if not found:
        print(f"nothing to fill: no {OUTBOX_FILE} or {TRACES_OUTBOX_FILE} under {', '.join(map(str, args.dirs))}")
        return 0
    for job_dir in found:
        print(fill_job(job_dir), flush=True)
    print(f"filled {len(found)} job dirs", flush=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
