"""The trace writer: its bulk path writes every row MLflow's own calls write, its process flushes, survives
signals, and a dead writer process loses nothing submitted after it died; a trace is never doubled."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import mlflow
import pytest
import sqlalchemy
from mlflow.tracing.client import TracingClient
from mlflow.tracing.otel.translation import translate_span_when_storing

from cts import tracking
from cts.core.records import ArmResult, ErrorInfo, Record
from cts.core.types import Instance
from cts.tracking import _sqlbulk
from cts.tracking._sqlbulk import TABLES, write_in_bulk
from cts.tracking._tracedoc import trace_document, trace_id_for
from cts.tracking._tracewrite import _start_one_by_one, mlflow_trace, trace_parts, write_traces
from cts.tracking._writer import TraceWriter
from tests.helpers import gold_for

_SIZE_KEYS = ("mlflow.trace.sizeBytes", "mlflow.trace.sizeStats")
_QUEUE = "sql_trace_rollup_rebuild_queue"
_S = 1_000_000_000


@pytest.fixture(scope="module")
def _template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty store, migrated once (a few seconds) for every store of this module."""
    path = tmp_path_factory.mktemp("template") / "m.db"
    tracking.prepare_store(f"sqlite:///{path}")
    return path


@pytest.fixture
def fresh(_template: Path) -> Any:
    return lambda tmp_path, name: _store(tmp_path, name, _template)


def _store(tmp_path: Path, name: str, template: Path) -> tuple[str, str, str]:
    """A fresh SQLite store (a copy of ``template``) with one experiment and one run: (uri, experiment id, run id)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, tmp_path / name)
    uri = f"sqlite:///{tmp_path / name}"
    tracking.prepare_store(uri)
    client = mlflow.MlflowClient(uri)
    experiment = client.create_experiment("w", artifact_location=(tmp_path / f"{name}-artifacts").as_uri())
    return uri, experiment, client.create_run(experiment).info.run_id


def _lines(inst: Instance, t0: int, reuse: bool) -> list[dict[str, Any]]:
    """Trace lines as the pipeline writes them: stage times, a WebDancer-like search (an LLM step naming its
    model, a tool call and its result) and a backend whose single step returns JSON text."""
    at = [t0 + i * _S // 10 for i in range(12)]
    stages = [("clarify", 0), ("ua answer 1", 1), ("rewrite", 2), ("qtype", 3)]
    instance = {"arm": "instance", "start_ns": at[0], "end_ns": at[11]}
    instance["stages"] = [{"stage": s, "start_ns": at[i], "end_ns": at[i + 1]} for s, i in stages]
    steps = [
        {"type": "llm", "turn": 1, "t_ns": at[5], "latency_s": 0.05, "model": "qwen-7b", "content": "想一想 🪐"},
        {"type": "tool_call", "turn": 1, "name": "search", "t_ns": at[5], "args": {"query": inst.blurred_query}},
        {"type": "tool_result", "turn": 2, "name": "search", "t_ns": at[6], "content": "水星是行星\x7f"},
    ]
    arm = {"search": (4, 7), "judge": (7, 8)}
    lines = [instance] + [
        {
            "arm": name,
            "query": inst.blurred_query,
            "trace": trace,
            "stages": [{"stage": s, "start_ns": at[a], "end_ns": at[b]} for s, (a, b) in arm.items()],
        }
        for name, trace in (
            ("clarified", steps),
            ("orig", [{"tool": "search", "q": "水星", "result": '{"answer": "水星"}'}]),
        )
    ]
    return lines[::2] if reuse else lines  # without its own line the clarified arm reuses the orig search


def _docs(run_id: str, experiment: str, n: int = 4, days_ago: float = 0.0) -> list[dict[str, Any]]:
    """Documents of ``n`` instances in Chinese: one with an unscored clarified arm (an error), one whose
    clarified arm reuses the orig search; every one with a list-valued expectation (the gold nuggets)."""
    docs = []
    start = time.time_ns() - int(days_ago * 86_400 * _S)
    for i in range(n):
        inst = Instance(f"i{i}", f"介绍一下水星 {i}", f"介绍一下行星水星 {i}")
        error = ErrorInfo("search", "invalid_output", "搜索失败：后端不可用") if i == 1 else None
        clarified = ArmResult(
            query=inst.blurred_query, answer="水星是行星", labels={} if error else {"n1": "full", "n2": "none"},
            score=None if error else 75.0, error=error,
        )  # fmt: skip
        orig = ArmResult(query=inst.blurred_query, answer="水星", labels={"n1": "partial", "n2": "none"}, score=37.5)
        record = Record(
            id=inst.id, k=1, questions=("哪个水星?",), answers=("unknown" if i % 2 else "行星",),
            rewritten_query=inst.blurred_query, clarified=clarified, orig=orig, elapsed_s=0.9,
            models={"judge": "LexicalJudge"},
        )  # fmt: skip
        gold = gold_for(inst.id, ("水星是行星", 2), ("水星没有卫星", 1))
        lines = _lines(inst, start + i * 13 * 3_600 * _S, reuse=i == 2)
        doc = trace_document(inst, gold, record, lines, {"cts.system": "系统"})
        doc.update(trace_id=trace_id_for(run_id, inst.id), run_id=run_id, experiment_id=experiment)
        docs.append(doc)
    return docs


def _own_calls(uri: str, docs: list[dict[str, Any]]) -> None:
    """Write ``docs`` with MLflow's own calls (``start_trace`` per trace, one ``log_spans``)."""
    client = TracingClient(uri)
    started = _start_one_by_one(client, [(d, mlflow_trace(d)) for d in copy.deepcopy(docs)], [])
    client.log_spans(docs[0]["experiment_id"], [s for _, t in started for s in t.data.spans])


def _table_rows(uri: str, root: Path) -> dict[str, list[str]]:
    """Every row of the tables a trace writes (all their columns, as stored), less what two writes cannot share."""
    engine = sqlalchemy.create_engine(uri)
    meta = sqlalchemy.MetaData()
    meta.reflect(engine, only=[*TABLES, _QUEUE])
    out = {}
    with engine.connect() as conn:
        for name in (*TABLES, _QUEUE):
            rows = [dict(r._mapping) for r in conn.execute(sqlalchemy.select(meta.tables[name]))]
            for row in rows:
                for key in ("assessment_id", "created_timestamp", "last_updated_timestamp"):
                    row.pop(key, None)
                if row.get("key") in _SIZE_KEYS:
                    row["value"] = "(size)"
                if row.get("key") == "mlflow.artifactLocation":
                    row["value"] = row["value"].replace(root.as_uri(), "<root>")
            out[name] = sorted(json.dumps(r, ensure_ascii=False, sort_keys=True, default=str) for r in rows)
    engine.dispose()
    return out


def _view(uri: str, trace_id: str) -> dict[str, Any]:
    """A trace as MLflow returns it, all of it but what two writes cannot share (artifact paths, assessment
    ids and times, the size figures: see test_the_size_figures_are_mlflows)."""
    trace = mlflow.MlflowClient(uri).get_trace(trace_id).to_dict()
    info = trace["info"]
    info["tags"].pop("mlflow.artifactLocation")
    for key in _SIZE_KEYS:
        info["trace_metadata"].pop(key)
    for a in info["assessments"]:
        for key in ("assessment_id", "create_time", "last_update_time"):
            a.pop(key)
    info["assessments"].sort(key=lambda a: a["assessment_name"])
    return trace


def _both_ways(fresh: Any, tmp_path: Path, days_ago: float = 0.0) -> tuple[str, str, list[dict[str, Any]]]:
    """The same documents written by the bulk path and by MLflow's own calls into twin stores."""
    bulk_uri, experiment, run = fresh(tmp_path / "bulk", "m.db")
    own_uri, own_experiment, _ = fresh(tmp_path / "own", "m.db")
    assert own_experiment == experiment
    docs = _docs(run, experiment, days_ago=days_ago)
    assert write_in_bulk(TracingClient(bulk_uri).store, [trace_parts(d) for d in docs]) == len(docs)
    _own_calls(own_uri, docs)
    return bulk_uri, own_uri, docs


@pytest.mark.parametrize("executemany", ["driver", "sqlalchemy"])  # SQLite's; other databases'
def test_the_bulk_path_writes_every_row_mlflows_own_calls_write(
    fresh: Any, tmp_path: Path, monkeypatch: Any, executemany: str
) -> None:
    if executemany == "sqlalchemy":
        monkeypatch.setattr(_sqlbulk, "_DRIVER_EXECUTEMANY", frozenset())
    bulk_uri, own_uri, docs = _both_ways(fresh, tmp_path)
    bulk, own = _table_rows(bulk_uri, tmp_path / "bulk"), _table_rows(own_uri, tmp_path / "own")
    assert [len(bulk[t]) for t in TABLES] == [len(own[t]) for t in TABLES]
    assert len(bulk["spans"]) == sum(len(d["spans"]) for d in docs)
    for table in TABLES:
        assert bulk[table] == own[table], table
    for doc in docs:
        assert _view(bulk_uri, doc["trace_id"]) == _view(own_uri, doc["trace_id"])
    spans = [json.loads(r) for r in bulk["spans"]]
    assert {s["model_name"] for s in spans} == {None, "qwen-7b"}  # MLflow's translation ran where it adds something
    assert any("介绍一下水星" in s["content"] for s in spans)  # stored unescaped, as MLflow stores it
    found = mlflow.MlflowClient(bulk_uri).search_traces(
        locations=[docs[0]["experiment_id"]], filter_string=f"metadata.`mlflow.sourceRun` = '{docs[0]['run_id']}'"
    )
    assert sorted(t.info.tags["cts.instance_id"] for t in found) == ["i0", "i1", "i2", "i3"]  # linked to the run


def test_with_rollups_on_it_queues_the_partitions_mlflow_queues(fresh: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("MLFLOW_SQL_TRACE_ROLLUPS_ENABLED", "true")
    bulk_uri, own_uri, _ = _both_ways(fresh, tmp_path, days_ago=3)  # a day old at least: younger ones are not queued
    bulk, own = _table_rows(bulk_uri, tmp_path / "bulk"), _table_rows(own_uri, tmp_path / "own")
    assert len(bulk[_QUEUE]) >= 6 and bulk[_QUEUE] == own[_QUEUE]  # 3 families over two days at least
    assert bulk["trace_info"] == own["trace_info"]


def test_the_size_figures_are_mlflows(fresh: Any, tmp_path: Path) -> None:
    bulk_uri, own_uri, docs = _both_ways(fresh, tmp_path)
    for doc in docs:
        ours, theirs = (
            mlflow.MlflowClient(u).get_trace(doc["trace_id"]).info.trace_metadata for u in (bulk_uri, own_uri)
        )
        stats, expected = json.loads(ours[_SIZE_KEYS[1]]), json.loads(theirs[_SIZE_KEYS[1]])
        total, expected_total = stats.pop("total_size_bytes"), expected.pop("total_size_bytes")
        assert stats == expected  # each span's size is exactly MLflow's
        # an assessment made on a whole second prints its two times 4 characters shorter (MLflow's own count varies so)
        assert abs(total - expected_total) in range(0, 8 * len(doc["assessments"]) + 1, 4)
        assert ours[_SIZE_KEYS[0]] == str(total)


def test_mlflows_translation_leaves_the_spans_it_skips_as_they_are() -> None:
    docs = _docs("r" * 32, "1")
    spans = [s for d in docs for s in trace_parts(d)["spans"]]
    m = _sqlbulk._mlflow()
    free = [s for s in spans if _sqlbulk._translation_free(m, s)]
    assert len(free) >= len(spans) // 2
    for span in free:
        assert translate_span_when_storing(_sqlbulk._AsSpan(span)) == span
    root = copy.deepcopy(free[0])
    changed = {
        "a JSON string of JSON": {"mlflow.spanOutputs": json.dumps('{"a": 1}')},
        "a model in the inputs": {"mlflow.spanInputs": json.dumps({"model": "gpt-4o"})},
        "another convention's keys": {"gen_ai.usage.input_tokens": "3", "gen_ai.usage.output_tokens": "4"},
    }
    for why, attributes in changed.items():
        span = {**root, "attributes": {**root["attributes"], **attributes}}
        assert translate_span_when_storing(_sqlbulk._AsSpan(span)) != span, why  # MLflow would change these ...
        assert not _sqlbulk._translation_free(m, span), why  # ... so the bulk path lets it


def test_a_trace_already_in_the_store_is_not_written_twice(fresh: Any, tmp_path: Path) -> None:
    uri, experiment, run = fresh(tmp_path, "m.db")
    docs = _docs(run, experiment)
    client = TracingClient(uri)
    assert write_traces(client, docs[:1]) == (1, [])
    before = _table_rows(uri, tmp_path)
    batch = [trace_parts(d) for d in [docs[1], *docs, docs[2]]]  # the stored one, and one twice in the batch
    assert write_in_bulk(client.store, batch) == len(docs) - 1  # the bulk path, writing the new ones once
    after = _table_rows(uri, tmp_path)
    first = docs[0]["trace_id"]
    for table in TABLES:
        assert [r for r in after[table] if first in r] == [r for r in before[table] if first in r], table
    own_uri, _, _ = fresh(tmp_path / "own", "m.db")
    _own_calls(own_uri, [{**d, "experiment_id": experiment} for d in docs])
    own = _table_rows(own_uri, tmp_path / "own")
    assert [len(after[t]) for t in TABLES] == [len(own[t]) for t in TABLES]
    trace = mlflow.MlflowClient(uri).get_trace(first)
    names = [a.name for a in trace.info.assessments]
    assert len(names) == len(set(names)) == len(docs[0]["assessments"])
    assert write_traces(client, docs) == (0, [])


def test_a_writer_reads_its_experiment_once_per_while_and_writes_one_trace_a_batch_as_in_one(
    fresh: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    uri, experiment, run = fresh(tmp_path, "m.db")
    docs = _docs(run, experiment)
    client, reads = TracingClient(uri), []
    get_experiment = client.store.get_experiment
    monkeypatch.setattr(client.store, "get_experiment", lambda eid: reads.append(eid) or get_experiment(eid))
    known = _sqlbulk.KnownExperiments()
    for doc in docs:  # a sweep's writer gets a trace or two per batch
        assert write_traces(client, [doc], known) == (1, [])
    assert reads == [experiment]
    whole_uri, _, _ = fresh(tmp_path / "whole", "m.db")
    assert write_in_bulk(TracingClient(whole_uri).store, [trace_parts(d) for d in docs]) == len(docs)
    assert _table_rows(uri, tmp_path) == _table_rows(whole_uri, tmp_path / "whole")
    mlflow.MlflowClient(uri).delete_experiment(experiment)
    more = _docs(run, experiment, n=5)[4:]
    assert write_in_bulk(client.store, [trace_parts(d) for d in more], known) == 1  # read within its while
    known.ttl_s = 0.0
    later = [trace_parts(d) for d in _docs(run, experiment, n=6)[5:]]
    assert write_in_bulk(client.store, later, known) is None  # read again: deleted, as MLflow's calls refuse it


def test_a_failed_bulk_write_commits_nothing_and_mlflows_calls_write_instead(
    fresh: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    uri, experiment, run = fresh(tmp_path, "m.db")
    docs = _docs(run, experiment)
    span_row = _sqlbulk._span_row

    def broken(*args: Any) -> tuple[dict[str, Any], int]:
        row, size = span_row(*args)
        return {**row, "content": None}, size  # the spans insert, after the trace_info one, fails

    monkeypatch.setattr(_sqlbulk, "_span_row", broken)
    client = TracingClient(uri)
    assert write_in_bulk(client.store, [trace_parts(d) for d in docs]) is None
    assert not any(_table_rows(uri, tmp_path)[t] for t in TABLES)  # rolled back whole
    assert write_traces(client, docs) == (len(docs), [])  # MLflow's own calls
    assert write_in_bulk(object(), [trace_parts(d) for d in docs]) is None  # not an SQL store: MLflow's calls


@pytest.mark.parametrize("key", ["session.id", "user.id", "mlflow.traceTag.owner", "gen_ai.usage.input_tokens"])
def test_a_span_with_trace_level_attributes_is_left_to_mlflows_calls(fresh: Any, tmp_path: Path, key: str) -> None:
    uri, experiment, run = fresh(tmp_path, "m.db")
    docs = _docs(run, experiment, n=2)
    docs[1]["spans"][0]["attributes"][key] = "7"  # log_spans makes a column, metadata or a tag of it
    client = TracingClient(uri)
    assert write_in_bulk(client.store, [trace_parts(d) for d in docs]) is None
    assert write_traces(client, docs) == (2, [])


@pytest.mark.slow
def test_the_writer_process_flushes_ignores_signals_and_a_dead_one_loses_nothing_after(
    fresh: Any, tmp_path: Path
) -> None:
    uri, experiment, run = fresh(tmp_path, "p.db")
    docs = _docs(run, experiment, n=6)
    writer = TraceWriter(uri, in_process_docs=0)
    try:
        writer.submit(docs[:2])
        assert writer.flush() == (2, [])
        assert writer._proc is not None
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


def test_a_writer_whose_process_cannot_open_the_store_is_closed_at_once(tmp_path: Path) -> None:
    """The process ends on a store it cannot open; nobody waits the minute a flush may take for its ack."""
    db = tmp_path / "garbage.db"
    db.write_bytes(b"not a database" * 100)
    started = time.monotonic()
    writer = TraceWriter(f"sqlite:///{db}", in_process_docs=0)
    # Asked while the process still imports MLflow: the request sits in its pipe, never answered.
    assert writer.flush() == (0, [])  # nothing was on its way, so nothing is reported lost
    writer.close()
    assert time.monotonic() - started < 10  # the flush's limit is 60 s: an unreleased wait takes all of it
    assert writer._proc.wait(5) == 1  # it said why on its stderr and exited
    assert db.read_bytes() == b"not a database" * 100


def test_a_held_writer_closed_before_it_is_opened_is_killed_and_creates_no_store(tmp_path: Path) -> None:
    """A launch that fails its checks ends its head-start writer at once: no store, no wait for MLflow's import."""
    db = tmp_path / "never.db"
    writer = TraceWriter(f"sqlite:///{db}", open_store=False, in_process_docs=0)
    assert writer.held and writer._proc is not None
    writer.close()
    assert writer._proc.wait(5) == -signal.SIGKILL  # not asked to stop and waited for: ended
    assert not db.exists()


@pytest.mark.slow
def test_a_held_writer_opens_the_store_only_when_told_or_given_documents(fresh: Any, tmp_path: Path) -> None:
    db = tmp_path / "later.db"
    writer = TraceWriter(f"sqlite:///{db}", open_store=False, in_process_docs=0)
    try:
        assert writer.flush() == (0, [])  # answered once the process has imported MLflow
        assert not db.exists() and writer.held
        writer.open()
        assert writer.flush() == (0, []) and not writer.held
        assert db.is_file()  # prepared by the process
    finally:
        writer.close()
    uri, experiment, run = fresh(tmp_path / "docs", "h.db")
    docs = _docs(run, experiment, n=2)
    writer = TraceWriter(uri, open_store=False, in_process_docs=0)
    try:
        writer.submit(docs)  # documents open it as well
        assert not writer.held
        assert writer.flush() == (2, [])
    finally:
        writer.close()


def test_a_small_jobs_traces_are_written_here_and_a_larger_ones_rest_by_the_writer_process(
    fresh: Any, tmp_path: Path
) -> None:
    """The process costs about 2 s of CPU to start: it starts only for the documents past ``in_process_docs``."""
    uri, experiment, run = fresh(tmp_path, "s.db")
    docs = _docs(run, experiment, n=7)
    writer = TraceWriter(uri, linger_s=0.0, in_process_docs=4)
    try:
        writer.submit(docs[:4])
        assert writer.flush() == (4, [])
        assert writer._proc is None  # written by this process
        writer.submit(docs[4:])
        assert writer.flush() == (3, [])
        assert writer._proc is not None and writer._proc.poll() is None  # the rest went to the process
    finally:
        writer.close()
    writer._proc.wait(5)  # ended with the writer (else TimeoutExpired)
    client = mlflow.MlflowClient(uri)
    found = client.search_traces(locations=[experiment], filter_string=f"metadata.`mlflow.sourceRun` = '{run}'")
    assert sorted(t.info.trace_id for t in found) == sorted(d["trace_id"] for d in docs)


def test_a_held_writer_that_writes_here_closed_before_it_is_opened_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    writer = TraceWriter(f"sqlite:///{db}", open_store=False)
    assert writer.held
    writer.close()
    assert writer._proc is None and not writer._sender.is_alive()
    assert not db.exists()


def test_close_held_writers_ends_only_the_writers_never_opened(tmp_path: Path, monkeypatch: Any) -> None:
    from cts.tracking import _writer

    monkeypatch.setattr(_writer, "_WRITERS", {})
    started: list[tuple[str, bool]] = []

    class Fake:
        def __init__(self, uri: str, open_store: bool = True, in_process_docs: int = 0) -> None:
            self.uri, self.held, self.closed = uri, not open_store, False
            started.append((uri, open_store))

        def open(self) -> None:
            self.held = False

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(_writer, "TraceWriter", Fake)
    tracking.start_trace_writer("sqlite:///a.db", open_store=False)
    tracking.start_trace_writer("sqlite:///b.db", open_store=False)
    tracking.start_trace_writer("sqlite:///b.db")  # the checks passed: the same process opens the store
    a, b = _writer._WRITERS["sqlite:///a.db"], _writer._WRITERS["sqlite:///b.db"]
    tracking.close_held_writers()
    assert a.closed and not b.closed and list(_writer._WRITERS) == ["sqlite:///b.db"]
    assert started == [("sqlite:///a.db", False), ("sqlite:///b.db", False)]  # one process per store
