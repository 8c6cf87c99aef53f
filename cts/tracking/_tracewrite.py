"""Trace documents in, MLflow traces in the store out: what the trace writer's process does with each batch.

The process itself (:mod:`cts.tracking._writermain`) reads the batches off its pipe. Each document
becomes what MLflow's tracing would make of it (:func:`trace_parts`), and a batch is
written in one transaction of MLflow's SQL store, row by row as MLflow writes them
(:func:`cts.tracking._sqlbulk.write_in_bulk`; under 1 ms of CPU a trace); a tracking server, or
any failure, gets MLflow's own ``start_trace`` per trace and one ``log_spans``. None of it runs in
the job's process while the writer process lives.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from cts.tracking._outbox import store_down, unreachable
from cts.tracking._sqlbulk import KnownExperiments, write_in_bulk
from cts.tracking._tracedoc import built_document

log = logging.getLogger("cts.tracking.writer")

BATCH = 256
"""Most documents written in one go (one ``log_spans`` call)."""


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _span_id(trace_id: str, index: int) -> bytes:
    return hashlib.sha256(f"{trace_id}\0{index}".encode()).digest()[:8]


@functools.cache
def _encoder(ensure_ascii: bool = False) -> json.JSONEncoder:
    """``json.dumps(value, cls=TraceJSONEncoder, ensure_ascii=...)`` as one reused encoder (the same text)."""
    from mlflow.tracing.utils import TraceJSONEncoder

    return TraceJSONEncoder(ensure_ascii=ensure_ascii)


def _json(value: Any) -> str:
    return _encoder().encode(value)


def _span_dicts(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The document's spans in MLflow's span-dict form (``Span.to_dict``), with ids derived from the trace id."""
    from mlflow.tracing.constant import SpanAttributeKey

    trace_id = doc["trace_id"]
    otel = _b64(bytes.fromhex(trace_id.removeprefix("tr-")))
    ids = [_b64(_span_id(trace_id, i)) for i in range(len(doc["spans"]))]
    request_id = json.dumps(trace_id)
    out = []
    for i, span in enumerate(doc["spans"]):
        attributes = {SpanAttributeKey.REQUEST_ID: request_id, SpanAttributeKey.SPAN_TYPE: _json(span["type"])}
        if span["parent"] is None:
            attributes[SpanAttributeKey.EXPERIMENT_ID] = json.dumps(doc["experiment_id"])
        if span["inputs"] is not None:
            attributes[SpanAttributeKey.INPUTS] = _json(span["inputs"])
        attributes.update({k: _json(v) for k, v in span["attributes"].items()})
        if span["outputs"] is not None:
            attributes[SpanAttributeKey.OUTPUTS] = _json(span["outputs"])
        if (level := _log_level(span["type"])) is not None:
            attributes[SpanAttributeKey.LOG_LEVEL] = level
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


@functools.cache
def _log_level(span_type: str) -> str | None:
    """The severity MLflow gives a span of this type when it ends, as its attribute text (None where MLflow has no span levels)."""
    try:
        from mlflow.tracing.utils.default_log_level import default_log_level_for_span_type
    except ImportError:
        return None
    return json.dumps(int(default_log_level_for_span_type(span_type)))


def _assessment(a: Any, trace_id: str) -> Any:
    """One :class:`cts.tracking.Assessed` as MLflow's Feedback or Expectation on ``trace_id``."""
    from mlflow.entities import AssessmentError, AssessmentSource, Expectation, Feedback

    source = AssessmentSource(source_type=a.source_type, source_id=a.source_id)
    common = {"name": a.name, "value": a.value, "source": source, "metadata": dict(a.metadata) or None}
    if a.expectation:
        return Expectation(**common, trace_id=trace_id)
    error = AssessmentError(error_code=a.error[0], error_message=a.error[1]) if a.error else None
    return Feedback(**common, trace_id=trace_id, error=error, rationale=a.rationale)


def trace_parts(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What MLflow's tracing makes of one document before a store sees it, as plain data.

    Returns:
        ``trace_id``, ``experiment_id`` (a string), ``request_time`` and ``execution_duration``
        (ms), ``state`` (``OK`` or ``ERROR``), ``metadata`` and ``tags`` of the trace info (no size
        statistics yet), ``spans`` (span dicts, root first), ``assessments`` (the document's
        :class:`cts.tracking.Assessed`), ``created_ms`` (when they were made), the two previews as
        ``set_request_response_preview`` makes them and ``info_size`` (see :func:`_info_size`).
    """
    from mlflow.tracing.constant import TRACE_SCHEMA_VERSION, TRACE_SCHEMA_VERSION_KEY, TraceMetadataKey, TraceTagKey

    root = doc["spans"][0]
    parts = {
        "trace_id": doc["trace_id"],
        "experiment_id": str(doc["experiment_id"]),
        "request_time": root["start_ns"] // 1_000_000,
        "execution_duration": (root["end_ns"] - root["start_ns"]) // 1_000_000,
        "state": "ERROR" if root["status"] == "ERROR" else "OK",
        "metadata": {
            TraceMetadataKey.SOURCE_RUN: doc["run_id"],
            TraceMetadataKey.INPUTS: _cut(root["inputs"]),
            TraceMetadataKey.OUTPUTS: _cut(root["outputs"]),
            TRACE_SCHEMA_VERSION_KEY: str(TRACE_SCHEMA_VERSION),
        },
        "tags": {**doc["tags"], TraceTagKey.TRACE_NAME: root["name"]},
        "spans": _span_dicts(doc),
        "assessments": list(doc["assessments"]),
        "created_ms": int(time.time() * 1000),
    }
    return _with_previews(parts)


def _with_previews(parts: dict[str, Any]) -> dict[str, Any]:
    """``parts`` with the previews ``set_request_response_preview`` makes and ``info_size`` (neither with an
    MLflow lacking MLflow's preview function: the bulk path then leaves the traces to MLflow's calls)."""
    from mlflow.tracing.constant import SpanAttributeKey as Attr

    try:
        from mlflow.tracing.utils.truncation import _get_truncated_preview as preview
    except ImportError:
        return parts
    root = parts["spans"][0]["attributes"]
    texts = {
        "request_preview": (root.get(Attr.INPUTS), "user"),
        "response_preview": (root.get(Attr.OUTPUTS), "assistant"),
    }
    parts |= {key: None if text is None else preview(text, role=role) for key, (text, role) in texts.items()}
    parts["info_size"] = _info_size(parts)
    return parts


def _cut(value: Any) -> str:
    """A root span's inputs or outputs as the trace's metadata keeps them (JSON, cut as MLflow cuts it)."""
    from mlflow.tracing.constant import MAX_CHARS_IN_TRACE_INFO_METADATA as LIMIT
    from mlflow.tracing.constant import TRUNCATION_SUFFIX

    text = "" if value is None else _json(value)
    return text if len(text) <= LIMIT else text[: LIMIT - len(TRUNCATION_SUFFIX)] + TRUNCATION_SUFFIX


def _info_size(parts: Mapping[str, Any]) -> int:
    """Bytes of the trace info's JSON as ``add_size_stats_to_trace_metadata`` counts them (``Trace.to_json`` without spans).

    Built from the parts with protobuf's timestamps and numbers, without MLflow's protobuf message (a
    fifth of a ms a trace); equal to MLflow's count but where that varies from run to run itself
    (assessments made on a whole second print their times 4 characters shorter)."""
    created = _timestamp(parts["created_ms"])
    info = {
        "trace_id": parts["trace_id"],
        "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": parts["experiment_id"]}},
        "request_time": _timestamp(parts["request_time"]),
        "state": parts["state"],
        "trace_metadata": parts["metadata"],
        "assessments": [_assessment_json(a, parts["trace_id"], created) for a in parts["assessments"]],
        "request_preview": parts["request_preview"],
        "response_preview": parts["response_preview"],
        "tags": parts["tags"],
        "execution_duration_ms": parts["execution_duration"],
    }
    whole = {"info": {k: v for k, v in info.items() if v is not None and v != []}, "data": {"spans": []}}
    return len(_encoder(ensure_ascii=True).encode(whole))


def _assessment_json(a: Any, trace_id: str, created: str) -> dict[str, Any]:
    """An assessment as ``Assessment.to_dictionary`` (protobuf JSON) gives it, for its size."""
    source = {"source_type": a.source_type, "source_id": a.source_id}
    out: dict[str, Any] = {"assessment_name": a.name, "trace_id": trace_id, "source": source}
    out |= {"create_time": created, "last_update_time": created}
    if a.expectation and isinstance(a.value, str | int | float | bool):
        out["expectation"] = {"value": _proto_value(a.value)}
    elif a.expectation:
        out["expectation"] = {"serialized_value": {"serialization_format": "JSON_FORMAT", "value": json.dumps(a.value)}}
    else:
        out["feedback"] = {"value": _proto_value(a.value)}
        if a.error:
            out["feedback"]["error"] = {"error_code": a.error[0], "error_message": a.error[1]}
        out |= {"rationale": a.rationale} if a.rationale is not None else {}
        out["valid"] = True  # MLflow's Feedback sets it; its Expectation leaves it unset
    out |= {"metadata": dict(a.metadata)} if a.metadata else {}
    return out


def _proto_value(value: Any) -> Any:
    """``value`` as protobuf's JSON of a ``google.protobuf.Value`` prints it (every number a double)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, Mapping):
        return {k: _proto_value(v) for k, v in value.items()}
    return [_proto_value(v) for v in value] if isinstance(value, list | tuple) else value


def _timestamp(ms: int) -> str:
    """A time in ms as protobuf's JSON prints a Timestamp (no fraction on a whole second)."""
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000))
    return f"{text}.{ms % 1000:03d}Z" if ms % 1000 else f"{text}Z"


def mlflow_trace(doc: Mapping[str, Any]) -> Any:
    """The MLflow :class:`~mlflow.entities.Trace` of one document, as MLflow's own tracing would have built it
    (:func:`trace_parts` as MLflow's entities, with MLflow's previews and size statistics)."""
    from mlflow.entities import Span, Trace, TraceData, TraceInfo, TraceLocation, TraceState
    from mlflow.tracing.utils import add_size_stats_to_trace_metadata
    from mlflow.tracing.utils.truncation import set_request_response_preview

    parts = trace_parts(doc)
    trace_id = parts["trace_id"]
    info = TraceInfo(
        trace_id=trace_id,
        trace_location=TraceLocation.from_experiment_id(parts["experiment_id"]),
        request_time=parts["request_time"],
        execution_duration=parts["execution_duration"],
        state=TraceState(parts["state"]),
        trace_metadata=dict(parts["metadata"]),
        tags=dict(parts["tags"]),
        assessments=[_assessment(a, trace_id) for a in parts["assessments"]],
    )
    trace = Trace(info, TraceData([Span.from_dict(d) for d in parts["spans"]]))
    set_request_response_preview(info, trace.data)
    add_size_stats_to_trace_metadata(trace)
    return trace


def _failure(doc: Mapping[str, Any], e: Exception) -> str:
    return f"{doc.get('instance_id')}: {type(e).__name__}: {e}"[:500]


def write_traces(
    client: Any, docs: Sequence[Mapping[str, Any]], experiments: KnownExperiments | None = None
) -> tuple[int, list[str]]:
    """Write documents through ``client`` (MLflow's TracingClient): in one transaction where the store allows it.

    A document whose trace the store already holds is not written again (see :func:`_start_one_by_one`).
    ``experiments``: the writer's experiments read so far (the bulk path reads each again after a while).

    Returns:
        How many traces were written, and one message per document that was not.
    """
    failures: list[str] = []
    parts = []
    for doc in docs:
        try:
            built = built_document(doc)  # a pending one's spans are built here, in the writer's process
            parts.append((built, trace_parts(built)))
        except Exception as e:  # noqa: BLE001 - one bad document must not lose the others
            failures.append(_failure(doc, e))
    written = write_in_bulk(client.store, [p for _, p in parts], experiments)
    if written is None:
        written = _write_one_by_one(client, [doc for doc, _ in parts], failures)
    return written, failures


def _write_one_by_one(client: Any, docs: Sequence[Mapping[str, Any]], failures: list[str]) -> int:
    """MLflow's own calls: ``start_trace`` per new trace (:func:`_start_one_by_one`), one ``log_spans`` per experiment."""
    traces = []
    for doc in docs:
        try:
            traces.append((doc, mlflow_trace(doc)))
        except Exception as e:  # noqa: BLE001 - one bad document must not lose the others
            failures.append(_failure(doc, e))
    traces = _start_one_by_one(client, traces, failures)
    if traces and store_down(getattr(client, "tracking_uri", "")) is not None:  # the rest would only retry
        failures.append(f"spans of {len(traces)} traces: the store is down")
        return len(traces)
    spans: dict[str, list[Any]] = defaultdict(list)
    for doc, trace in traces:
        spans[str(doc["experiment_id"])].extend(trace.data.spans)
    for experiment, batch in spans.items():
        try:
            client.log_spans(experiment, batch)
        except Exception as e:  # noqa: BLE001 - the infos are written; say that their spans are not
            failures.append(f"spans of {len(batch)} traces: {type(e).__name__}: {e}"[:500])
    return len(traces)


def _start_one_by_one(client: Any, traces: list[tuple[Any, Any]], failures: list[str]) -> list[tuple[Any, Any]]:
    """MLflow's own ``start_trace`` per trace (any store), skipping traces the store already holds.

    A trace already there (its id derives from the run, the instance and the repeat) was written
    by an earlier writer: writing it again would merge a second set of assessments into it.
    """
    started = []
    for n, (doc, trace) in enumerate(traces):
        try:
            if _exists(client, trace.info.trace_id):
                continue
            client.start_trace(trace.info)
        except Exception as e:  # noqa: BLE001 - one bad trace must not lose the others
            failures.append(_failure(doc, e))
            if unreachable(getattr(client, "tracking_uri", ""), e):  # a dead server: each would retry in vain
                failures.extend(_failure(d, e) for d, _ in traces[n + 1 :])
                break
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
