"""Rows and figures of MLflow's trace tables that :mod:`cts.tracking._sqlbulk` writes: an assessment's row and a
trace's size statistics, as MLflow's own calls make them (``tests/tracking/test_trace_writer.py`` compares them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def ascii_json_size(text: str) -> int:
    """Length of ``json.dumps(value)`` (ASCII escapes) from ``text``, the same JSON with ``ensure_ascii=False``.

    The two differ only in what ``ensure_ascii`` escapes: each character above ``~`` becomes
    ``\\uXXXX`` (6 characters), one outside the Basic Multilingual Plane a surrogate pair (12).
    """
    ascii_chars = len(text.encode("ascii", "ignore")) - text.count("\x7f")
    astral = len(text.encode("utf-16-le")) // 2 - len(text)
    return ascii_chars + 6 * (len(text) - ascii_chars - astral) + 12 * astral


def size_stats(m: Any, span_sizes: list[int], info_size: int) -> dict[str, str]:
    """``mlflow.trace.sizeStats`` and ``mlflow.trace.sizeBytes``, as ``add_size_stats_to_trace_metadata`` counts them."""
    total = sum(span_sizes) + info_size + (len(span_sizes) - 1) * 2
    ordered = sorted(span_sizes)
    stats = {
        m.TraceSizeStatsKey.TOTAL_SIZE_BYTES: total,
        m.TraceSizeStatsKey.NUM_SPANS: len(span_sizes),
        m.TraceSizeStatsKey.MAX_SPAN_SIZE_BYTES: max(span_sizes),
        m.TraceSizeStatsKey.P25_SPAN_SIZE_BYTES: int(m.percentile(ordered, 0.25)),
        m.TraceSizeStatsKey.P50_SPAN_SIZE_BYTES: int(m.percentile(ordered, 0.50)),
        m.TraceSizeStatsKey.P75_SPAN_SIZE_BYTES: int(m.percentile(ordered, 0.75)),
    }
    return {m.TraceMetadataKey.SIZE_STATS: json.dumps(stats), m.TraceMetadataKey.SIZE_BYTES: str(total)}


def assessment_row(m: Any, a: Any, trace: Mapping[str, Any], eid: int) -> dict[str, Any]:
    """One ``assessments`` row: ``SqlAssessments.from_mlflow_entity`` of the Feedback or Expectation, as ``start_trace`` fills it."""
    if a.expectation and a.value is None:
        raise ValueError(f"expectation {a.name} has no value")  # MLflow's Expectation refuses it
    source = m.AssessmentSource(source_type=a.source_type, source_id=a.source_id)  # MLflow standardises the type
    metadata = dict(a.metadata) or None
    error = None
    if a.error and not a.expectation:
        error = json.dumps(m.AssessmentError(error_code=a.error[0], error_message=a.error[1]).to_dictionary())
    aggregate, numeric = m.analytics.assessment_aggregate(a.value)
    return {
        "assessment_id": m.generate_assessment_id(),
        "trace_id": trace["trace_id"],
        "name": a.name,
        "assessment_type": "expectation" if a.expectation else "feedback",
        "value": json.dumps(a.value),
        "error": error,
        "created_timestamp": trace["created_ms"],
        "last_updated_timestamp": trace["created_ms"],
        "experiment_id": eid,
        "trace_timestamp_ms": trace["request_time"],
        "aggregate_value": aggregate,
        "is_numeric_value": numeric,
        "source_type": source.source_type,
        "source_id": source.source_id,
        "run_id": (metadata or {}).get(m.source_run_key),
        "span_id": None,
        "rationale": None if a.expectation else a.rationale,
        "overrides": None,
        "valid": True,
        "assessment_metadata": json.dumps(metadata) if metadata else None,
    }
