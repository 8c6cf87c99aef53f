"""A batch of new traces into MLflow's SQL store in one transaction (the trace writer's fast path).

What ``SqlAlchemyStore.start_trace`` and then ``log_spans`` write for a new trace (the info row, its
tags, metadata and assessments, the span rows), for many traces at once, with MLflow's own row
classes and span translation. ``tests/tracking/test_trace_digest.py`` and
``tests/tracking/test_trace_writer.py`` check that the traces read back are the ones MLflow's own
calls write, so a change in MLflow's schema fails there, not silently.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("cts.tracking.writer")


def write_in_bulk(store: Any, traces: Sequence[Any]) -> bool:
    """Write many new traces (info, tags, metadata, assessments, spans) in one transaction of MLflow's SQL store.

    The rows ``SqlAlchemyStore.start_trace`` and then ``log_spans`` write for a new trace, with
    MLflow's own row classes and span translation, for a whole batch: one session, one
    experiment lookup, one commit, and one multi-row insert of the spans (about 2 ms of CPU
    a trace against 16 ms through the two calls). Stores of another kind (a tracking server),
    an MLflow without these classes, or any failure (a trace already there) return False with
    nothing written, and the caller writes them one by one through MLflow's public calls.
    """
    try:
        rows = _row_classes()
    except ImportError:
        return False
    if not isinstance(store, rows.SqlAlchemyStore) or not traces:
        return not traces
    try:
        with store.ManagedSessionMaker(read_only=False) as session:
            experiments: dict[str, Any] = {}
            partitions: list[Any] = []
            spans: list[dict[str, Any]] = []
            for trace in traces:
                eid = str(trace.info.experiment_id)
                if eid not in experiments:
                    experiments[eid] = store.get_experiment(eid)
                    store._check_experiment_is_active(experiments[eid])
                session.add(_trace_row(rows, store, experiments[eid], trace.info))
                spans += [_span_row(rows, store, span, int(eid)) for span in trace.data.spans]
                times = [trace.info.request_time]
                partitions += [
                    (f, int(eid), times) for f in (rows.RollupFamily.TRACE_METRIC, rows.RollupFamily.ASSESSMENT)
                ]
                partitions += [
                    (rows.RollupFamily.SPAN_COST, int(eid), [r["start_time_unix_nano"] // 1_000_000])
                    for r in spans[-len(trace.data.spans) :]
                ]
            rows.enqueue_rollup_rebuild_partitions(session, partitions)
            session.flush()
            session.execute(rows.insert(rows.SqlSpan.__table__), spans)
    except Exception as e:  # noqa: BLE001 - nothing was committed: the caller writes them one by one
        log.debug("bulk write of %d traces failed (%s); one by one instead", len(traces), e)
        return False
    return True


def _row_classes() -> Any:
    """What :func:`write_in_bulk` takes from MLflow (ImportError where an MLflow lacks any of it)."""
    from types import SimpleNamespace

    from mlflow.store.tracking.dbmodels.models import (
        SqlAssessments,
        SqlSpan,
        SqlTraceInfo,
        SqlTraceMetadata,
        SqlTraceTag,
    )
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore, _try_parse_json_string
    from mlflow.store.tracking.utils.sql_trace_rollups import RollupFamily, enqueue_rollup_rebuild_partitions
    from mlflow.store.tracking.utils.trace_analytics import (
        PROMOTED_TRACE_METADATA_KEYS,
        analytics_columns_from_metadata,
        bounded_model_dimension,
        finite_float_or_none,
        validate_trace_name,
    )
    from mlflow.tracing.constant import SpanAttributeKey, SpansLocation, TraceMetadataKey, TraceTagKey
    from mlflow.tracing.otel.translation import translate_span_when_storing
    from mlflow.tracing.utils import TraceJSONEncoder
    from sqlalchemy import insert

    return SimpleNamespace(
        SpansLocation=SpansLocation,
        SqlAssessments=SqlAssessments,
        SqlSpan=SqlSpan,
        SqlTraceInfo=SqlTraceInfo,
        SqlTraceMetadata=SqlTraceMetadata,
        SqlTraceTag=SqlTraceTag,
        SqlAlchemyStore=SqlAlchemyStore,
        _try_parse_json_string=_try_parse_json_string,
        RollupFamily=RollupFamily,
        enqueue_rollup_rebuild_partitions=enqueue_rollup_rebuild_partitions,
        PROMOTED_TRACE_METADATA_KEYS=PROMOTED_TRACE_METADATA_KEYS,
        analytics_columns_from_metadata=analytics_columns_from_metadata,
        bounded_model_dimension=bounded_model_dimension,
        finite_float_or_none=finite_float_or_none,
        validate_trace_name=validate_trace_name,
        SpanAttributeKey=SpanAttributeKey,
        TraceMetadataKey=TraceMetadataKey,
        TraceTagKey=TraceTagKey,
        translate_span_when_storing=translate_span_when_storing,
        TraceJSONEncoder=TraceJSONEncoder,
        insert=insert,
    )


def _trace_row(rows: Any, store: Any, experiment: Any, info: Any) -> Any:
    """The trace's info row with its tags, metadata and assessments, as ``start_trace`` then ``log_spans`` leave them."""
    metadata = dict(info.trace_metadata.items())
    row = rows.SqlTraceInfo(
        request_id=info.trace_id,
        experiment_id=str(info.experiment_id),
        timestamp_ms=info.request_time,
        execution_time_ms=info.execution_duration,
        status=info.state.value,
        client_request_id=info.client_request_id,
        request_preview=info.request_preview,
        response_preview=info.response_preview,
        trace_name=rows.validate_trace_name(info.tags.get(rows.TraceTagKey.TRACE_NAME)),
        db_payload_generation=1,  # log_spans' bump: the spans are in the tracking store
        **rows.analytics_columns_from_metadata(metadata),
    )
    tags = {k: v for k, v in info.tags.items() if k != rows.TraceTagKey.TRACE_NAME}
    tags[rows.TraceTagKey.SPANS_LOCATION] = rows.SpansLocation.TRACKING_STORE.value
    row.tags = [rows.SqlTraceTag(request_id=info.trace_id, key=k, value=v) for k, v in tags.items()]
    row.tags.append(store._get_trace_artifact_location_tag(experiment, info.trace_id))
    for key in rows.PROMOTED_TRACE_METADATA_KEYS:
        metadata.pop(key, None)
    metadata[rows.TraceMetadataKey.TRACE_INFO_FINALIZED] = "true"
    row.assessments = [_sql_assessment(rows.SqlAssessments, a, info) for a in info.assessments]
    row.request_metadata = [
        rows.SqlTraceMetadata(request_id=info.trace_id, key=k, value=v) for k, v in sorted(metadata.items())
    ]
    return row


def _span_row(rows: Any, store: Any, span: Any, experiment_id: int) -> dict[str, Any]:
    """One ``spans`` row, as ``log_spans`` makes it."""
    stored = rows.translate_span_when_storing(span)
    attributes = stored.get("attributes", {})
    cost: dict[str, Any] = {}
    if raw := attributes.get(rows.SpanAttributeKey.LLM_COST):
        try:
            cost = json.loads(raw)
        except (TypeError, ValueError):
            cost = {}
    return {
        "trace_id": span.trace_id,
        "experiment_id": experiment_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_id,
        "name": span.name,
        "type": span.span_type,
        "status": span.status.status_code,
        "start_time_unix_nano": span.start_time_ns,
        "end_time_unix_nano": span.end_time_ns,
        "content": json.dumps(stored, cls=rows.TraceJSONEncoder, ensure_ascii=store.db_type == "mssql"),
        "input_cost": rows.finite_float_or_none(cost.get("input_cost")),
        "output_cost": rows.finite_float_or_none(cost.get("output_cost")),
        "total_cost": rows.finite_float_or_none(cost.get("total_cost")),
        "model_name": rows.bounded_model_dimension(
            rows._try_parse_json_string(attributes.get(rows.SpanAttributeKey.MODEL))
        ),
        "model_provider": rows.bounded_model_dimension(
            rows._try_parse_json_string(attributes.get(rows.SpanAttributeKey.MODEL_PROVIDER))
        ),
    }


def _sql_assessment(model: Any, assessment: Any, info: Any) -> Any:
    row = model.from_mlflow_entity(assessment)
    row.trace_id = info.trace_id
    row.experiment_id = int(info.experiment_id)
    row.trace_timestamp_ms = info.request_time
    return row
