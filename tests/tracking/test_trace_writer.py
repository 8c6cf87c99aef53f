"""The trace writer: its bulk path writes what MLflow's own calls write, its process flushes, survives
signals, and a dead writer process loses nothing submitted after it died; a trace is never doubled."""

from __future__ import annotations

import copy
import os
import signal
import time
from pathlib import Path
from typing import Any

import mlflow
import pytest
from mlflow.tracing.client import TracingClient

from cts import tracking
from cts.core.records import ArmResult, Record
from cts.core.types import Instance
from cts.tracking._sqlbulk import write_in_bulk
from cts.tracking._tracedoc import trace_document, trace_id_for
from cts.tracking._tracewrite import _start_one_by_one, mlflow_trace, write_traces
from cts.tracking._writer import TraceWriter
from tests.helpers import gold_for


def _store(tmp_path: Path, name: str) -> tuple[str, str, str]:
    """A fresh SQLite store with one experiment and one run: (uri, experiment id, run id)."""
    uri = f"sqlite:///{tmp_path / name}"
    tracking.prepare_store(uri)
    client = mlflow.MlflowClient(uri)
    experiment = client.create_experiment("w", artifact_location=(tmp_path / f"{name}-artifacts").as_uri())
    return uri, experiment, client.create_run(experiment).info.run_id


def _docs(run_id: str, experiment: str, n: int = 3) -> list[dict[str, Any]]:
    """Trace documents of ``n`` small instances, one unscored, with Chinese text."""
    docs = []
    for i in range(n):
        inst = Instance(f"i{i}", f"介绍一下水星 {i}", f"介绍一下行星水星 {i}")
        scored = i != 1
        arm = ArmResult(
            query=inst.blurred_query, answer="水星是行星", labels={"n1": "full"}, score=100.0 if scored else None
        )
        record = Record(
            id=inst.id, k=1, questions=("哪个?",), answers=("unknown",), rewritten_query=inst.blurred_query,
            clarified=arm, orig=arm, elapsed_s=0.01, models={"judge": "LexicalJudge"},
        )  # fmt: skip
        lines = [{"id": inst.id, "arm": "orig", "query": inst.blurred_query, "trace": [{"tool": "search", "q": "x"}]}]
        doc = trace_document(inst, gold_for(inst.id, ("水星是行星", 2)), record, lines, {"cts.system": "s"})
        doc.update(trace_id=trace_id_for(run_id, inst.id), run_id=run_id, experiment_id=experiment)
        docs.append(doc)
    return docs


def _view(uri: str, trace_id: str) -> dict[str, Any]:
    """A trace as MLflow returns it, without what two stores cannot share (paths, write times)."""
    trace = mlflow.MlflowClient(uri).get_trace(trace_id).to_dict()
    info = trace["info"]
    info["tags"].pop("mlflow.artifactLocation")
    info.pop("trace_location")
    info["trace_metadata"].pop("mlflow.sourceRun")
    for a in info["assessments"]:
        for key in ("assessment_id", "create_time", "last_update_time"):
            a.pop(key)
    info["assessments"].sort(key=lambda a: a["assessment_name"])
    for span in trace["data"]["spans"]:
        span["attributes"].pop("mlflow.experimentId", None)
    return trace


def test_the_bulk_path_writes_what_mlflows_own_calls_write(tmp_path: Path) -> None:
    bulk_uri, bulk_exp, run = _store(tmp_path, "bulk.db")
    own_uri, own_exp, _ = _store(tmp_path, "own.db")
    docs = _docs(run, bulk_exp)
    assert write_in_bulk(TracingClient(bulk_uri).store, [mlflow_trace(d) for d in docs])  # the fast path was taken
    own = TracingClient(own_uri)
    own_docs = [{**d, "experiment_id": own_exp} for d in copy.deepcopy(docs)]
    started = _start_one_by_one(own, [(d, mlflow_trace(d)) for d in own_docs], [])
    own.log_spans(own_exp, [s for _, t in started for s in t.data.spans])
    for doc in docs:
        assert _view(bulk_uri, doc["trace_id"]) == _view(own_uri, doc["trace_id"])
    found = mlflow.MlflowClient(bulk_uri).search_traces(
        locations=[bulk_exp], filter_string=f"metadata.`mlflow.sourceRun` = '{run}'"
    )
    assert sorted(t.info.tags["cts.instance_id"] for t in found) == ["i0", "i1", "i2"]  # linked to the run


def test_a_trace_already_in_the_store_is_not_written_twice(tmp_path: Path) -> None:
    uri, experiment, run = _store(tmp_path, "m.db")
    docs = _docs(run, experiment)
    client = TracingClient(uri)
    assert write_traces(client, docs[:1]) == (1, [])
    written, failures = write_traces(client, docs)  # the bulk transaction fails on i0: one by one, i0 skipped
    assert (written, failures) == (2, [])
    trace = mlflow.MlflowClient(uri).get_trace(docs[0]["trace_id"])
    names = [a.name for a in trace.info.assessments]
    assert len(names) == len(set(names)) == len(docs[0]["assessments"])


@pytest.mark.slow
def test_the_writer_process_flushes_ignores_signals_and_a_dead_one_loses_nothing_after(tmp_path: Path) -> None:
    uri, experiment, run = _store(tmp_path, "p.db")
    docs = _docs(run, experiment, n=6)
    writer = TraceWriter(uri)
    try:
        writer.submit(docs[:2])
        assert writer.flush() == (2, [])
        os.kill(writer._proc.pid, signal.SIGTERM)  # the job's own signal reaches its group, not the writer
        os.kill(writer._proc.pid, signal.SIGINT)
        time.sleep(0.3)
        assert writer._proc.poll() is None
        writer.submit(docs[2:4])
        assert writer.flush() == (2, [])
        writer._proc.kill()
        writer._proc.wait()
        writer.submit(docs[4:])  # written by this process instead
        assert writer.flush()[0] == 2
    finally:
        writer.close()
    client = mlflow.MlflowClient(uri)
    found = client.search_traces(locations=[experiment], filter_string=f"metadata.`mlflow.sourceRun` = '{run}'")
    assert sorted(t.info.trace_id for t in found) == sorted(d["trace_id"] for d in docs)
