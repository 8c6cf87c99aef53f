"""CPU per trace in the trace writer: 200 trace documents of a real offline job written to a fresh store.

    PYTHONPATH=. python benchmarks/trace_writer_bench.py [--reps 5] [--k 2] [--docs FILE] [--one-by-one] [--batch N]

How the documents are captured: the script runs ``run.py experiment=offline k=K`` (200 instances,
traces on, its own temporary MLflow store) in a child process whose
:meth:`cts.tracking._writer.TraceWriter.submit` also keeps every document it is handed (the
documents the job's process sends to its writer process, with their trace, run and experiment
ids; pending ones, whose spans the writer builds), and pickles them when the job ends; ``--docs FILE`` keeps them in FILE and reuses them on
the next call. Each rep then writes the 200 documents into a fresh SQLite store (a copy of one
migrated beforehand, not timed) with the writer process's own call,
:func:`cts.tracking._tracewrite.write_traces`, in batches of
:data:`~cts.tracking._tracewrite.BATCH`, and reads this process's CPU time (SQLite runs in it)
around the writes; each rep starts with the writer's caches empty, as a job's writer process does,
and checks afterwards (untimed) that the bulk path wrote every trace. ``--one-by-one`` times MLflow's own calls instead (``start_trace`` per trace,
one ``log_spans``: the writer's fallback). ``--batch N`` writes N documents a call (a sweep's writer gets
one or two a batch). Reported: ms of CPU per trace, median over the reps.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

_CAPTURE = """
import atexit, pickle, runpy, sys
from cts.tracking import _writer

out, docs = sys.argv[1], []
submit = _writer.TraceWriter.submit

def keep(self, batch):
    docs.extend(batch)
    submit(self, batch)

_writer.TraceWriter.submit = keep
atexit.register(lambda: open(out, "wb").write(pickle.dumps(docs)))
sys.argv = [sys.argv[2], *sys.argv[3:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def capture(out: Path, k: int) -> list[dict[str, Any]]:
    """The trace documents of one offline job (``experiment=offline k=k``), also pickled to ``out``."""
    with tempfile.TemporaryDirectory(prefix="cts-trace-docs-") as tmp:
        args = [
            "experiment=offline",
            f"k={k}",
            "tracking.instance_traces=true",
            f"tracking.uri=sqlite:///{Path(tmp) / 'mlflow.db'}",
            f"hydra.run.dir={Path(tmp) / 'job'}",
        ]
        subprocess.run(
            [sys.executable, "-c", _CAPTURE, str(out), str(REPO / "run.py"), *args],
            check=True,
            capture_output=True,
            cwd=tmp,
        )
    docs: list[dict[str, Any]] = pickle.loads(out.read_bytes())
    return docs


def _fresh_store(root: Path, template: Path) -> tuple[Any, str, str]:
    """A copy of the migrated ``template`` store with one experiment and run: (TracingClient, experiment id, run id)."""
    import mlflow
    from mlflow.tracing.client import TracingClient

    from cts import tracking

    shutil.copyfile(template, root / "mlflow.db")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    tracking.prepare_store(uri)
    client = mlflow.MlflowClient(uri)
    experiment = client.create_experiment("bench", artifact_location=(root / "artifacts").as_uri())
    run_id = client.create_run(experiment).info.run_id
    tracing = TracingClient(uri)
    _ = tracing.store  # built on first use: before the timing
    return tracing, experiment, run_id


def one_rep(root: Path, template: Path, docs: list[dict[str, Any]], one_by_one: bool, per_call: int = 0) -> float:
    """Seconds of CPU this process spent writing ``docs`` into a fresh store (checking, untimed, that the bulk path wrote them)."""
    from cts.tracking import _sqlbulk
    from cts.tracking._tracedoc import built_document
    from cts.tracking._tracewrite import BATCH, _start_one_by_one, mlflow_trace, trace_parts, write_traces

    root.mkdir()
    client, experiment, run_id = _fresh_store(root, template)
    for cache in (_sqlbulk._left_alone, _sqlbulk._sets_trace_values, _sqlbulk._insert_sql):
        cache.cache_clear()  # each job's writer process starts with none of it
    docs = [{**d, "experiment_id": experiment, "run_id": run_id} for d in docs]
    known = _sqlbulk.KnownExperiments()  # one per writer process
    size = per_call or BATCH
    start = time.process_time()
    for i in range(0, len(docs), size):
        batch = docs[i : i + size]
        if one_by_one:
            built = [built_document(d) for d in batch]  # as write_traces does before either path
            started = _start_one_by_one(client, [(d, mlflow_trace(d)) for d in built], [])
            client.log_spans(experiment, [s for _, t in started for s in t.data.spans])
        else:
            written, failures = write_traces(client, batch, known)
            assert (written, failures) == (len(batch), []), failures
    spent = time.process_time() - start
    if not one_by_one:  # the bulk path wrote them: a second try finds them all stored and writes none
        assert _sqlbulk.write_in_bulk(client.store, [trace_parts(built_document(d)) for d in docs]) == 0
    return spent


def main() -> None:
    """Capture (or load) the documents, time the reps, print ms of CPU per trace."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--docs", type=Path, help="pickle of captured documents (made on first use)")
    parser.add_argument("--one-by-one", action="store_true", help="time MLflow's own calls instead")
    parser.add_argument("--batch", type=int, default=0, help="documents per write (default BATCH; a sweep's: 1-2)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cts-trace-writer-") as tmp:
        path = args.docs or Path(tmp) / "docs.pickle"
        docs = pickle.loads(path.read_bytes()) if path.exists() else capture(path, args.k)
        from cts.tracking._tracedoc import built_document

        spans = sum(len(built_document(d)["spans"]) for d in docs) / len(docs)
        print(f"{len(docs)} documents, {spans:.1f} spans each", flush=True)
        template = Path(tmp) / "template.db"
        from cts import tracking

        tracking.prepare_store(f"sqlite:///{template}")  # migrated once, copied per rep
        one_rep(Path(tmp) / "warm", template, docs[:8], args.one_by_one)  # imports and first compilations
        gc.freeze()  # as the writer process does once it has started (cts.tracking._writermain.serve)
        per_trace = []
        for rep in range(args.reps):
            per_trace.append(
                one_rep(Path(tmp) / str(rep), template, docs, args.one_by_one, args.batch) / len(docs) * 1000
            )
            print(f"rep {rep}: {per_trace[-1]:.2f} ms CPU per trace", flush=True)
    print(f"median {statistics.median(per_trace):.2f} ms CPU per trace ({'one by one' if args.one_by_one else 'bulk'})")


if __name__ == "__main__":
    main()
