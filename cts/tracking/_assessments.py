"""Assessments on the per-instance traces: scores, delta, labels and the unknown count as feedback, gold as expectation.

The job attaches them while the trace is still open, so they reach the store with the
trace in one write; the robustness analyses add theirs to the finished traces later.
Nugget ids (``n1``..) name different facts in each instance, so the labels are one
feedback (``n1=full n2=none ...``, a string: MLflow's trace tables show no mapping), never
one column per id. MLflow's tables show the first few assessment names in alphabetical
order, so the names put the delta and both scores first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cts.core.types import UNKNOWN
from cts.tracking._outbox import store_down
from cts.tracking._store import mlflow_module

SCORE = "restore_score_100"
ORIG_SCORE = "orig_restore_score_100"
DELTA = "delta_vs_orig"
LABELS = "nugget_labels"
N_UNKNOWN = "unknown_answers"
NUGGETS = "gold_nuggets"


@dataclass(frozen=True)
class Assessed:
    """One assessment to log: a feedback (or, with ``expectation``, an expectation) on one trace.

    Attributes:
        name: The assessment's name (a column of MLflow's trace tables).
        value: Its value (a number, a string, a mapping ...); None with ``error``.
        source_type: ``CODE``, ``LLM_JUDGE`` or ``HUMAN``.
        source_id: Who assessed: the judge's model, ``cts`` for values computed from others.
        rationale: Why, in words (shown beside the value).
        metadata: Extra context (string values).
        error: ``(code, message)`` when the value could not be produced (an unscored arm).
        expectation: Whether this is ground truth (the gold nuggets) rather than feedback.
    """

    name: str
    value: Any
    source_type: str = "CODE"
    source_id: str = "cts"
    rationale: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    error: tuple[str, str] | None = None
    expectation: bool = False


def _arm_score(name: str, arm: Any, judge: str) -> Assessed | None:
    if arm is None:
        return None
    if arm.score is not None:
        return Assessed(name, float(arm.score), "LLM_JUDGE", judge, metadata={"query": str(arm.query)[:500]})
    error = arm.error
    code, message = (error.kind, f"{error.stage}: {error.message}") if error else ("unscored", "no score")
    return Assessed(name, None, "LLM_JUDGE", judge, error=(str(code), message[:1000]))


def label_string(labels: Mapping[str, Any]) -> str:
    """``n1=full n2=partial n3=none``: one instance's nugget labels as one value."""
    return " ".join(f"{nid}={label}" for nid, label in labels.items())


def _labels(record: Any, judge: str, nuggets: Mapping[str, Any]) -> Assessed | None:
    """The judge's labels of the clarified arm; the orig arm's beside them (metadata, rationale)."""
    arm, orig = record.clarified, record.orig
    if arm is None or not arm.labels:
        return None
    orig_labels = dict(orig.labels) if orig is not None else {}
    why = "\n".join(
        f"{nid} (weight {nuggets[nid].weight if nid in nuggets else '?'}): {label}, orig "
        f"{orig_labels.get(nid, '-')}: {nuggets[nid].text if nid in nuggets else '?'}"
        for nid, label in arm.labels.items()
    )
    return Assessed(
        LABELS, label_string(arm.labels), "LLM_JUDGE", judge, why[:4000], {"orig_labels": label_string(orig_labels)}
    )


def instance_assessments(record: Any, gold: Any) -> list[Assessed]:
    """What the job knows of one instance, as assessments: both scores, the delta, labels, unknowns, gold.

    Args:
        record: The instance's :class:`cts.core.records.Record`.
        gold: Its :class:`cts.core.types.Gold` (the nuggets become one expectation).
    """
    judge = str(record.models.get("judge") or "judge")
    nuggets = {n.id: n for n in gold.nuggets}
    found: list[Assessed | None] = [
        _arm_score(SCORE, record.clarified, judge),
        _arm_score(ORIG_SCORE, record.orig, judge),
        _labels(record, judge, nuggets),
    ]
    if record.score is not None and record.orig_score is not None:
        found.append(
            Assessed(
                DELTA,
                float(record.score - record.orig_score),
                rationale=f"{SCORE} {record.score:g} - {ORIG_SCORE} {record.orig_score:g}",
            )
        )
    found.append(
        Assessed(N_UNKNOWN, sum(a == UNKNOWN for a in record.answers), rationale=f"of {len(record.answers)} answers")
    )
    found.append(
        Assessed(
            NUGGETS,
            [{"id": n.id, "text": n.text, "weight": n.weight} for n in gold.nuggets],
            source_id="gold",
            expectation=True,
        )
    )
    return [a for a in found if a is not None]


def log_assessments(trace_id: str, assessed: Sequence[Assessed]) -> None:
    """Log assessments on a trace (in memory while it is the active trace, else one store write each)."""
    mlflow = mlflow_module()
    from mlflow.entities import AssessmentError, AssessmentSource

    for a in assessed:
        source = AssessmentSource(source_type=a.source_type, source_id=a.source_id)
        if a.expectation:
            mlflow.log_expectation(
                trace_id=trace_id, name=a.name, value=a.value, source=source, metadata=dict(a.metadata) or None
            )
            continue
        error = AssessmentError(error_code=a.error[0], error_message=a.error[1]) if a.error else None
        mlflow.log_feedback(
            trace_id=trace_id,
            name=a.name,
            value=a.value,
            source=source,
            error=error,
            rationale=a.rationale,
            metadata=dict(a.metadata) or None,
        )


def trace_ids_of_runs(run_ids: Sequence[str]) -> dict[tuple[str, str], str]:
    """``(run id, instance id) -> trace id`` of the per-instance traces the runs logged (none: empty)."""
    mlflow = mlflow_module()
    if store_down(mlflow.get_tracking_uri()) is not None:
        return {}
    found: dict[tuple[str, str], str] = {}
    for experiment, run_id in run_experiments(mlflow.MlflowClient(), run_ids):
        for info in trace_infos(experiment, run_id):
            instance = info.tags.get("cts.instance_id")
            if instance:
                found.setdefault((run_id, instance), info.trace_id)
    return found


def run_experiments(client: Any, run_ids: Sequence[str]) -> list[tuple[str, str]]:
    """``(experiment id, run id)`` of each run the store holds (a run of another store, or deleted: left out)."""
    found = []
    for run_id in dict.fromkeys(r for r in run_ids if r):
        try:
            found.append((client.get_run(run_id).info.experiment_id, run_id))
        except Exception:  # noqa: BLE001 - a run of another store, or deleted: it has no traces here
            continue
    return found


def trace_infos(experiment: str, run_id: str) -> Iterator[Any]:
    mlflow = mlflow_module()
    traces = mlflow.search_traces(locations=[experiment], run_id=run_id, return_type="list", include_spans=False)
    return (t.info for t in traces)
