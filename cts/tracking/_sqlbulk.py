"""A batch of new traces into MLflow's SQL store in one transaction (the trace writer's fast path).

For a new trace, ``SqlAlchemyStore.start_trace`` and then ``log_spans`` write one ``trace_info``
row (``db_payload_generation`` 1: ``log_spans`` bumps it), its ``trace_tags`` (the trace's tags
less its name, which is a column, plus ``mlflow.artifactLocation`` and ``mlflow.spansLocation``),
its ``trace_request_metadata`` (less the keys promoted to columns, plus
``mlflow.trace.infoFinalized``), its ``assessments`` and one ``spans`` row per span, and queue
the rollup partitions it touches when rollups are enabled. :func:`write_in_bulk` writes the same
rows for a whole batch straight from :func:`cts.tracking._tracewrite.trace_parts`, with one
executemany insert per table: no Span, TraceInfo or ORM object is built (under 1 ms of CPU a
trace against about 5 through them: ``benchmarks/trace_writer_bench.py``).

Each span's stored JSON is its span dict after MLflow's translation, which leaves the spans cts
builds as they are (:func:`_translation_free`; a span it may change goes through MLflow's
``translate_span_when_storing``). The size statistics MLflow's tracing adds to a trace come from
that JSON (each span's size exactly MLflow's) and from the trace info's size that
:func:`cts.tracking._tracewrite.trace_parts` counts. ``tests/tracking/test_trace_writer.py``
compares every column of every row with what MLflow's own calls write, so a change in MLflow's
schema or translation fails there, not silently.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cts.tracking._sqlrows import ascii_json_size, assessment_row, size_stats

log = logging.getLogger("cts.tracking.writer")

TABLES = ("trace_info", "trace_tags", "trace_request_metadata", "assessments", "spans")
"""The tables a new trace has rows in, in insert order (the later ones refer to ``trace_info``)."""
_DRIVER_EXECUTEMANY = frozenset({"sqlite"})
"""Databases whose rows go to the driver's ``executemany`` as they are (:func:`_insert`)."""


@dataclass
class _Rows:
    """One trace's rows per table, and the rollup partitions it touches."""

    trace_info: list[dict[str, Any]] = field(default_factory=list)
    trace_tags: list[dict[str, Any]] = field(default_factory=list)
    trace_request_metadata: list[dict[str, Any]] = field(default_factory=list)
    assessments: list[dict[str, Any]] = field(default_factory=list)
    spans: list[dict[str, Any]] = field(default_factory=list)
    partitions: list[tuple[Any, int, list[int]]] = field(default_factory=list)


class KnownExperiments:
    """The experiments a writer found active, read again after ``ttl_s`` (not once per batch: with a trace or
    two per batch, as a sweep's writer gets them, that read was a fifth of the writer's CPU)."""

    def __init__(self, ttl_s: float = 30.0) -> None:
        self.ttl_s = ttl_s
        self._read: dict[tuple[int, str], tuple[float, Any]] = {}

    def get(self, store: Any, eid: str) -> Any:
        """Experiment ``eid`` of ``store``; raises as MLflow's writes do if it is not active."""
        now, read = time.monotonic(), self._read.get((id(store), eid))
        if read is None or now - read[0] > self.ttl_s:
            experiment = store.get_experiment(eid)
            store._check_experiment_is_active(experiment)
            read = self._read[(id(store), eid)] = (now, experiment)
        return read[1]


def write_in_bulk(
    store: Any, traces: Sequence[Mapping[str, Any]], experiments: KnownExperiments | None = None
) -> int | None:
    """Write new traces (:func:`cts.tracking._tracewrite.trace_parts`) into MLflow's SQL store in one transaction.

    Traces the store already holds, and repeats of a trace id in the batch, are left out (their
    ids derive from the run, the instance and the repeat: an earlier writer wrote them).

    Returns:
        How many traces were written; None, with nothing written, for a store of another kind
        (a tracking server), an MLflow without what this needs, or any failure: the caller then
        writes them through MLflow's public calls.
    """
    m = _mlflow()
    if m is None or not isinstance(store, m.SqlAlchemyStore) or not all("info_size" in t for t in traces):
        return None
    if not traces:
        return 0
    try:
        rows = _batch_rows(m, store, traces, experiments or KnownExperiments())
        with store.ManagedSessionMaker(read_only=False) as session:
            stored = _stored_ids(m, session, list(rows))
            fresh = [r for trace_id, r in rows.items() if trace_id not in stored]
            m.enqueue_rollup_rebuild_partitions(session, [p for r in fresh for p in r.partitions])
            for name in TABLES:
                if batch := [row for r in fresh for row in getattr(r, name)]:
                    _insert(m, session, m.tables[name], batch)
    except Exception as e:  # noqa: BLE001 - nothing was committed: the caller writes them one by one
        log.debug("bulk write of %d traces failed (%s); one by one instead", len(traces), e)
        return None
    return len(fresh)


def load_mlflow_parts() -> bool:
    """Import now what the bulk path takes from MLflow (False: this MLflow lacks some of it)."""
    return _mlflow() is not None


@functools.cache
def _mlflow() -> Any:
    """What this module takes from MLflow, imported once (None where an MLflow lacks any of it)."""
    from types import SimpleNamespace

    try:
        from mlflow.entities import AssessmentError, AssessmentSource
        from mlflow.store.tracking.dbmodels.models import Base, SqlTraceInfo
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore, _try_parse_json_string
        from mlflow.store.tracking.utils import trace_analytics
        from mlflow.store.tracking.utils.sql_trace_rollups import RollupFamily, enqueue_rollup_rebuild_partitions
        from mlflow.tracing.constant import (
            AssessmentMetadataKey,
            GenAiSemconvKey,
            SpansLocation,
            TraceMetadataKey,
            TraceSizeStatsKey,
            TraceTagKey,
        )
        from mlflow.tracing.constant import SpanAttributeKey as Attr
        from mlflow.tracing.otel.translation import translate_span_when_storing
        from mlflow.tracing.utils import TraceJSONEncoder, _calculate_percentile, generate_assessment_id
        from sqlalchemy import insert, select

        return SimpleNamespace(
            SqlAlchemyStore=SqlAlchemyStore,
            tables={name: Base.metadata.tables[name] for name in TABLES},
            trace_info_ids=SqlTraceInfo.__table__.c.request_id,
            insert=insert,
            select=select,
            analytics=trace_analytics,
            analytics_columns=(
                "session_id",
                *trace_analytics.TOKEN_COLUMN_BY_KEY.values(),
                *trace_analytics.COST_COLUMN_BY_KEY.values(),
            ),
            RollupFamily=RollupFamily,
            enqueue_rollup_rebuild_partitions=enqueue_rollup_rebuild_partitions,
            Attr=Attr,
            own_attributes=frozenset(  # the attributes cts gives a span for MLflow itself (_tracewrite._span_dicts)
                {Attr.REQUEST_ID, Attr.SPAN_TYPE, Attr.EXPERIMENT_ID, Attr.INPUTS, Attr.OUTPUTS, Attr.LOG_LEVEL}
            ),
            trace_level_keys=frozenset(  # span attributes log_spans turns into trace columns, metadata or tags
                {Attr.CHAT_USAGE, Attr.LLM_COST, Attr.SESSION_ID, GenAiSemconvKey.CONVERSATION_ID, "user.id"}
            ),
            SpansLocation=SpansLocation,
            TraceMetadataKey=TraceMetadataKey,
            TraceSizeStatsKey=TraceSizeStatsKey,
            TraceTagKey=TraceTagKey,
            translate_span_when_storing=translate_span_when_storing,
            TraceJSONEncoder=TraceJSONEncoder,
            ascii_json=TraceJSONEncoder(),  # json.dumps(value, cls=TraceJSONEncoder[, ensure_ascii=False])
            unicode_json=TraceJSONEncoder(ensure_ascii=False),
            percentile=_calculate_percentile,
            generate_assessment_id=generate_assessment_id,
            AssessmentError=AssessmentError,
            AssessmentSource=AssessmentSource,
            source_run_key=AssessmentMetadataKey.SOURCE_RUN_ID,
            try_parse_json_string=_try_parse_json_string,
        )
    except (ImportError, AttributeError):  # an MLflow older or newer than this module knows
        return None


def _insert(m: Any, session: Any, table: Any, rows: list[dict[str, Any]]) -> None:
    """An executemany INSERT of ``rows`` (all with the same keys) into ``table``, in the session's transaction.

    On SQLite the rows go to the driver's ``executemany`` as they are: sqlite3 binds these
    columns' Python values (str, int, float, bool, None) as SQLAlchemy's SQLite types would,
    without their per-row processing (a fifth of the write). Other databases get SQLAlchemy's
    executemany, which batches rows in the way their driver does best.
    """
    if session.bind.dialect.name not in _DRIVER_EXECUTEMANY:
        session.execute(m.insert(table), rows)
        return
    sql, order = _insert_sql(table, tuple(rows[0]), session.bind.dialect)
    session.connection().exec_driver_sql(sql, [tuple(row[k] for k in order) for row in rows])


@functools.lru_cache(maxsize=64)
def _insert_sql(table: Any, keys: tuple[str, ...], dialect: Any) -> tuple[str, tuple[str, ...]]:
    """The INSERT of ``keys`` into ``table`` compiled for ``dialect``, and its parameters' order (compiled once:
    a writer inserts a trace or two per batch in a sweep, and compiling cost as much as the insert)."""
    statement = _mlflow().insert(table).compile(dialect=dialect, column_keys=list(keys))
    return str(statement), tuple(statement.positiontup)


def _stored_ids(m: Any, session: Any, trace_ids: list[str]) -> set[str]:
    """Those of ``trace_ids`` the store holds already."""
    found = session.execute(m.select(m.trace_info_ids).where(m.trace_info_ids.in_(trace_ids)))
    return {row[0] for row in found}


def _batch_rows(
    m: Any, store: Any, traces: Sequence[Mapping[str, Any]], experiments: KnownExperiments
) -> dict[str, _Rows]:
    """Trace id -> its rows, for each trace of the batch (the first of a repeated id)."""
    unicode_text = store.db_type != "mssql"  # MSSQL's spans.content is not Unicode: MLflow escapes it there
    rows: dict[str, _Rows] = {}
    for trace in traces:
        if trace["trace_id"] not in rows:
            experiment = experiments.get(store, trace["experiment_id"])
            location = store._get_trace_artifact_location_tag(experiment, trace["trace_id"])
            rows[trace["trace_id"]] = _trace_rows(m, trace, location, unicode_text)
    return rows


def _trace_rows(m: Any, trace: Mapping[str, Any], location: Any, unicode_text: bool) -> _Rows:
    """The rows ``start_trace`` then ``log_spans`` write for one new trace."""
    trace_id, eid, request_time = trace["trace_id"], int(trace["experiment_id"]), trace["request_time"]
    spans, sizes = zip(*(_span_row(m, d, trace_id, eid, unicode_text) for d in trace["spans"]))
    metadata = dict(trace["metadata"])
    metadata.update(size_stats(m, list(sizes), trace["info_size"]))
    info = {
        "request_id": trace_id,
        "experiment_id": eid,
        "timestamp_ms": request_time,
        "execution_time_ms": trace["execution_duration"],
        "status": trace["state"],
        "client_request_id": None,
        "request_preview": trace["request_preview"],
        "response_preview": trace["response_preview"],
        "db_payload_generation": 1,
        "trace_name": m.analytics.validate_trace_name(trace["tags"].get(m.TraceTagKey.TRACE_NAME)),
        **dict.fromkeys(m.analytics_columns),
        **m.analytics.analytics_columns_from_metadata(metadata),
    }
    tags = {k: v for k, v in trace["tags"].items() if k != m.TraceTagKey.TRACE_NAME}
    tags[location.key] = location.value
    tags[m.TraceTagKey.SPANS_LOCATION] = m.SpansLocation.TRACKING_STORE.value
    for key in m.analytics.PROMOTED_TRACE_METADATA_KEYS:
        metadata.pop(key, None)
    metadata[m.TraceMetadataKey.TRACE_INFO_FINALIZED] = "true"
    families = (m.RollupFamily.TRACE_METRIC, m.RollupFamily.ASSESSMENT)
    return _Rows(
        trace_info=[info],
        trace_tags=[{"request_id": trace_id, "key": k, "value": v} for k, v in tags.items()],
        trace_request_metadata=[{"request_id": trace_id, "key": k, "value": v} for k, v in metadata.items()],
        assessments=[assessment_row(m, a, trace, eid) for a in trace["assessments"]],
        spans=list(spans),
        partitions=[(f, eid, [request_time]) for f in families]
        + [(m.RollupFamily.SPAN_COST, eid, [s["start_time_unix_nano"] // 1_000_000]) for s in spans],
    )


def _span_row(
    m: Any, span: Mapping[str, Any], trace_id: str, eid: int, unicode_text: bool
) -> tuple[dict[str, Any], int]:
    """One ``spans`` row as ``log_spans`` makes it, and the span's size as MLflow's size statistics count it."""
    stored = span if _translation_free(m, span) else m.translate_span_when_storing(_AsSpan(span))
    if _sets_trace_values(tuple(stored["attributes"])):
        raise ValueError(f"span {span['name']!r} sets trace-level values: MLflow's log_spans writes it")
    content = (m.unicode_json if unicode_text else m.ascii_json).encode(stored)
    size = ascii_json_size(content) if stored is span else len(m.ascii_json.encode(span))
    attributes = stored.get("attributes", {})
    cost: dict[str, Any] = {}
    if raw := attributes.get(m.Attr.LLM_COST):
        try:
            cost = json.loads(raw)
        except (TypeError, ValueError):
            cost = {}
    own = span["attributes"]
    parent = span["parent_span_id"]
    row = {
        "trace_id": trace_id,
        "experiment_id": eid,
        "span_id": base64.b64decode(span["span_id"]).hex(),
        "parent_span_id": None if parent is None else base64.b64decode(parent).hex(),
        "name": span["name"],
        "type": _decoded(own[m.Attr.SPAN_TYPE]),
        "status": span["status"]["code"].removeprefix("STATUS_CODE_"),
        "start_time_unix_nano": span["start_time_unix_nano"],
        "end_time_unix_nano": span["end_time_unix_nano"],
        "content": content,
        "input_cost": m.analytics.finite_float_or_none(cost.get("input_cost")),
        "output_cost": m.analytics.finite_float_or_none(cost.get("output_cost")),
        "total_cost": m.analytics.finite_float_or_none(cost.get("total_cost")),
        "model_name": _model_dimension(m, attributes.get(m.Attr.MODEL)),
        "model_provider": _model_dimension(m, attributes.get(m.Attr.MODEL_PROVIDER)),
    }
    return row, size


def _model_dimension(m: Any, value: Any) -> str | None:
    return None if value is None else m.analytics.bounded_model_dimension(m.try_parse_json_string(value))


@functools.lru_cache(maxsize=4096)
def _sets_trace_values(keys: tuple[str, ...]) -> bool:
    """Whether span attributes with these keys give a trace (not just its span) a column, metadata or tag in
    ``log_spans`` (token usage, cost, session, user, ``mlflow.traceTag.*``): the bulk path does not write those."""
    m = _mlflow()
    return any(k in m.trace_level_keys or k.startswith(m.Attr.TRACE_TAG_PREFIX) for k in keys)


@functools.lru_cache(maxsize=256)
def _decoded(text: str) -> Any:
    """A span type's attribute text decoded (a few distinct ones: each decoded once)."""
    return json.loads(text)


class _AsSpan:
    """A span dict where MLflow's translation wants a Span: it reads only ``to_dict()``."""

    def __init__(self, span: Mapping[str, Any]) -> None:
        self._span = span

    def to_dict(self) -> dict[str, Any]:
        return {**self._span, "attributes": dict(self._span["attributes"])}


def _translation_free(m: Any, span: Mapping[str, Any]) -> bool:
    """Whether MLflow's ``translate_span_when_storing`` returns this span dict as it is (False: it may not).

    MLflow's translation adds attributes that other tracing conventions (OpenTelemetry GenAI,
    OpenInference, ...) imply, read from their own attribute keys or from span events; unwraps
    attribute values JSON-encoded twice; and takes a model name from an ``inputs`` or ``outputs``
    mapping's ``model`` entry (the only use it makes of the attributes cts writes for MLflow
    itself). So a span without events, without a value that is a JSON string of JSON text, without
    ``"model"`` in its inputs or outputs, whose other attributes (a judge's labels ...) MLflow's
    translation leaves as they are on their own (:func:`_left_alone`), is left as it is.
    """
    if span["events"]:
        return False
    attributes = span["attributes"]
    others = []
    for key, text in attributes.items():
        if text[:1] == '"' and text[1:2] in (" ", "\\", "{", "["):
            return False  # a string that may be JSON itself (after spaces: an escape or a quote): MLflow unwraps those
        if key not in m.own_attributes:
            others.append((key, text))
        elif key in (m.Attr.INPUTS, m.Attr.OUTPUTS) and '"model"' in text:
            return False
    return not others or _left_alone(attributes[m.Attr.SPAN_TYPE], tuple(others))


@functools.lru_cache(maxsize=4096)
def _left_alone(span_type: str, others: tuple[tuple[str, str], ...]) -> bool:
    """Whether MLflow's translation leaves a span of ``span_type`` with only the attributes ``others`` as it is
    (each set asked once: a judge's labels repeat from instance to instance)."""
    m = _mlflow()
    probe = {"name": "", "events": [], "attributes": {m.Attr.SPAN_TYPE: span_type, **dict(others)}}
    return bool(m.translate_span_when_storing(_AsSpan(probe)) == probe)
