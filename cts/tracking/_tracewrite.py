"""The trace writer's own process: trace documents in, MLflow traces in the store out.

The process (:func:`main`, started by :class:`cts.tracking._writer.TraceWriter`) reads length-prefixed pickled messages on
stdin and answers on stdout (:func:`read_frame`, :func:`write_frame`):

- ``("docs", [doc, ...])``: trace documents (:func:`cts.tracking._tracedoc.trace_document` with
  ``trace_id``, ``run_id`` and ``experiment_id`` set) to write;
- ``("flush", token)``: answered with ``("ack", token, written, failures)`` once every document
  sent before it is in the store;
- ``("stop", token)``: the same, then the process exits (as it does when stdin closes: its parent died).

MLflow's SQL store spends most of a trace's cost outside the rows it writes (a session, an
experiment lookup and a commit per call, a multi-row statement compiled per batch of spans), so
a batch of traces is written in one transaction with MLflow's own row classes
(:func:`write_in_bulk`; a tracking server, or any failure: ``start_trace`` per trace and one
``log_spans``): about 2 ms of CPU a trace against about 70 ms through MLflow's span API and
asynchronous logging, and none of it in the job's process. SIGINT and SIGTERM are ignored: the parent, which gets them,
flushes this process before it exits, so a stopped job loses no trace.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import pickle
import signal
import struct
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import IO, Any

from cts.tracking._sqlbulk import write_in_bulk

log = logging.getLogger("cts.tracking.writer")

_HEADER = struct.Struct("!I")
BATCH = 256
"""Most documents written in one go (one ``log_spans`` call)."""


def write_frame(stream: IO[bytes], message: Any) -> None:
    """Send one message (pickled, length-prefixed) and flush."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next message, or None at the end of the stream."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(head)
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _span_id(trace_id: str, index: int) -> bytes:
    return hashlib.sha256(f"{trace_id}\0{index}".encode()).digest()[:8]


def _json(value: Any) -> str:
    from mlflow.tracing.utils import TraceJSONEncoder

    return json.dumps(value, cls=TraceJSONEncoder, ensure_ascii=False)


def _span_dicts(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The document's spans in MLflow's span-dict form (``Span.to_dict``), with ids derived from the trace id."""
    from mlflow.tracing.constant import SpanAttributeKey

    trace_id = doc["trace_id"]
    otel = _b64(bytes.fromhex(trace_id.removeprefix("tr-")))
    ids = [_b64(_span_id(trace_id, i)) for i in range(len(doc["spans"]))]
    out = []
    for i, span in enumerate(doc["spans"]):
        attributes = {
            SpanAttributeKey.REQUEST_ID: json.dumps(trace_id),
            SpanAttributeKey.SPAN_TYPE: _json(span["type"]),
        }
        if span["parent"] is None:
            attributes[SpanAttributeKey.EXPERIMENT_ID] = json.dumps(doc["experiment_id"])
        if span["inputs"] is not None:
            attributes[SpanAttributeKey.INPUTS] = _json(span["inputs"])
        attributes.update({k: _json(v) for k, v in span["attributes"].items()})
        if span["outputs"] is not None:
            attributes[SpanAttributeKey.OUTPUTS] = _json(span["outputs"])
        if (level := _log_level(span["type"])) is not None:
            attributes[SpanAttributeKey.LOG_LEVEL] = json.dumps(level)
        out.append(
            {
                "trace_id": otel,
                "span_id": ids[i],
                "parent_span_id": None if span["parent"] is None else ids[span["parent"]],
                "name": span["name"],
                "start_time_unix_nano": span["start_ns"],
                "end_time_unix_nano": span["end_ns"],
                "events": [],
                "status": {"code": f"STATUS_CODE_{span['status']}", "message": ""},
                "attributes": attributes,
                "links": [],
            }
        )
    return out


def _log_level(span_type: str) -> int | None:
    """The severity MLflow gives a span of this type when it ends (None where MLflow has no span levels)."""
    try:
        from mlflow.tracing.utils.default_log_level import default_log_level_for_span_type
    except ImportError:
        return None
    return int(default_log_level_for_span_type(span_type))


def _assessment(a: Any, trace_id: str) -> Any:
    """One :class:`cts.tracking.Assessed` as MLflow's Feedback or Expectation on ``trace_id``."""
    from mlflow.entities import AssessmentError, AssessmentSource, Expectation, Feedback

    source = AssessmentSource(source_type=a.source_type, source_id=a.source_id)
    metadata = dict(a.metadata) or None
    if a.expectation:
        return Expectation(name=a.name, value=a.value, source=source, metadata=metadata, trace_id=trace_id)
    error = AssessmentError(error_code=a.error[0], error_message=a.error[1]) if a.error else None
    return Feedback(
        name=a.name,
        value=a.value,
        source=source,
        error=error,
        rationale=a.rationale,
        metadata=metadata,
        trace_id=trace_id,
    )


def mlflow_trace(doc: Mapping[str, Any]) -> Any:
    """The MLflow :class:`~mlflow.entities.Trace` of one document, as MLflow's own tracing would have built it."""
    from mlflow.entities import Span, Trace, TraceData, TraceInfo, TraceLocation, TraceState
    from mlflow.tracing.constant import (
        MAX_CHARS_IN_TRACE_INFO_METADATA,
        TRACE_SCHEMA_VERSION,
        TRACE_SCHEMA_VERSION_KEY,
        TRUNCATION_SUFFIX,
        TraceMetadataKey,
        TraceTagKey,
    )
    from mlflow.tracing.utils import add_size_stats_to_trace_metadata
    from mlflow.tracing.utils.truncation import set_request_response_preview

    def cut(value: str) -> str:
        if len(value) <= MAX_CHARS_IN_TRACE_INFO_METADATA:
            return value
        return value[: MAX_CHARS_IN_TRACE_INFO_METADATA - len(TRUNCATION_SUFFIX)] + TRUNCATION_SUFFIX

    trace_id, root = doc["trace_id"], doc["spans"][0]
    info = TraceInfo(
        trace_id=trace_id,
        trace_location=TraceLocation.from_experiment_id(str(doc["experiment_id"])),
        request_time=root["start_ns"] // 1_000_000,
        execution_duration=(root["end_ns"] - root["start_ns"]) // 1_000_000,
        state=TraceState.ERROR if root["status"] == "ERROR" else TraceState.OK,
        trace_metadata={
            TraceMetadataKey.SOURCE_RUN: doc["run_id"],
            TraceMetadataKey.INPUTS: cut(_json(root["inputs"])) if root["inputs"] is not None else "",
            TraceMetadataKey.OUTPUTS: cut(_json(root["outputs"])) if root["outputs"] is not None else "",
            TRACE_SCHEMA_VERSION_KEY: str(TRACE_SCHEMA_VERSION),
        },
        tags={**doc["tags"], TraceTagKey.TRACE_NAME: root["name"]},
        assessments=[_assessment(a, trace_id) for a in doc["assessments"]],
    )
    trace = Trace(info, TraceData([Span.from_dict(d) for d in _span_dicts(doc)]))
    set_request_response_preview(info, trace.data)
    add_size_stats_to_trace_metadata(trace)
    return trace


def write_traces(client: Any, docs: Sequence[Mapping[str, Any]]) -> tuple[int, list[str]]:
    """Write documents through ``client`` (MLflow's TracingClient): in one transaction where the store allows it.

    Returns:
        How many traces were written, and one message per document that was not.
    """
    failures: list[str] = []
    traces = []
    for doc in docs:
        try:
            traces.append((doc, mlflow_trace(doc)))
        except Exception as e:  # noqa: BLE001 - one bad document must not lose the others
            failures.append(f"{doc.get('instance_id')}: {type(e).__name__}: {e}"[:500])
    if write_in_bulk(client.store, [t for _, t in traces]):
        return len(traces), failures
    traces = _start_one_by_one(client, traces, failures)
    spans: dict[str, list[Any]] = defaultdict(list)
    for doc, trace in traces:
        spans[str(doc["experiment_id"])].extend(trace.data.spans)
    for experiment, batch in spans.items():
        try:
            client.log_spans(experiment, batch)
        except Exception as e:  # noqa: BLE001 - the infos are written; say that their spans are not
            failures.append(f"spans of {len(batch)} traces: {type(e).__name__}: {e}"[:500])
    return len(traces), failures


def _start_one_by_one(client: Any, traces: list[tuple[Any, Any]], failures: list[str]) -> list[tuple[Any, Any]]:
    """MLflow's own ``start_trace`` per trace (any store), skipping traces the store already holds.

    A trace already there (its id derives from the run, the instance and the repeat) was written
    by an earlier writer: writing it again would merge a second set of assessments into it.
    """
    started = []
    for doc, trace in traces:
        try:
            if _exists(client, trace.info.trace_id):
                continue
            client.start_trace(trace.info)
        except Exception as e:  # noqa: BLE001 - one bad trace must not lose the others
            failures.append(f"{doc.get('instance_id')}: {type(e).__name__}: {e}"[:500])
            continue
        started.append((doc, trace))
    return started


def _exists(client: Any, trace_id: str) -> bool:
    from mlflow.exceptions import MlflowException

    try:
        client.get_trace_info(trace_id)
    except MlflowException:
        return False
    return True


def serve(uri: str, inbox: IO[bytes], outbox: IO[bytes]) -> None:
    """Write what arrives on ``inbox`` until ``stop`` or its end; acknowledge flushes on ``outbox``.

    The parent batches documents (:class:`cts.tracking._writer.TraceWriter`), so each ``docs``
    message is written as it arrives.
    """
    from mlflow.tracing.client import TracingClient

    from cts.tracking._store import prepare_store

    prepare_store(uri)  # under the store's lock: the job may be creating the store this moment
    client = TracingClient(uri)
    written, failures = 0, list[str]()
    while True:
        message = read_frame(inbox)
        if message is None:
            return
        kind, payload = message
        if kind == "docs":
            for start in range(0, len(payload), BATCH):
                n, failed = write_traces(client, payload[start : start + BATCH])
                written, failures = written + n, failures + failed
            continue
        write_frame(outbox, ("ack", payload, written, failures))
        written, failures = 0, []
        if kind == "stop":
            return


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the writer process (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="trace writer: %(message)s")
    (uri,) = argv if argv is not None else sys.argv[1:]  # python -c "...main()" <uri>
    serve(uri, sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
