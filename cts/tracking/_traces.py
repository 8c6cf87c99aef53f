"""MLflow traces: LLM-call spans, one trace per instance, and the records as an MLflow table."""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from cts.tracking._store import _mlflow


_TRACED: contextvars.ContextVar[bool] = contextvars.ContextVar("cts_trace_llm_calls", default=False)


def trace_llm_calls(runtime: Any) -> None:
    """Record every LLM call of ``runtime`` as an MLflow trace span (``services.llm.tracing``).

    Spans carry the role, model, prompt version, messages, reply, tokens, cost and
    whether the response cache served it; they attach to the active run's experiment.

    Under the sweep scheduler the jobs share one runtime and each calls this: the
    listener is registered once per runtime (one span per call, never one per job),
    and only calls made by a job that asked for tracing (this context, which the
    job's tasks inherit) become spans.
    """
    _TRACED.set(True)
    runtime.add_listener(_span_of_call)


def _span_of_call(event: Any) -> None:
    if not _TRACED.get():
        return
    mlflow = _mlflow()
    end = time.time_ns()
    span = mlflow.start_span_no_context(
        name=f"{event.role}:{event.spec_name}",
        span_type="LLM",
        inputs={"messages": list(event.messages), "params": dict(event.params)},
        attributes={"role": event.role, "model": event.model, "prompt_version": event.prompt_version,
                    "tokens_in": event.tokens_in, "tokens_out": event.tokens_out,
                    "cost_usd": event.cost_usd, "cached": event.cached},
        start_time_ns=end - int(event.latency_s * 1e9),
    )
    span.end(outputs={"text": event.text, "error": event.error}, end_time_ns=end,
             status="ERROR" if event.error else "OK")


# ----------------------------------------------------------------------------- per-instance traces

_TEXT_MAX = 4000  # characters of one span value kept in a trace (pages and prompts can be long)


def _clip(value: Any) -> Any:
    """Long strings (visited pages, prompts) cut so one trace stays small."""
    if isinstance(value, str):
        return value if len(value) <= _TEXT_MAX else value[:_TEXT_MAX] + f"... [{len(value) - _TEXT_MAX} more]"
    if isinstance(value, Mapping):
        return {str(k): _clip(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clip(v) for v in value]
    return value


def _child(parent: Any, name: str, span_type: str, inputs: Any, outputs: Any,
           attributes: Mapping[str, Any] | None = None) -> Any:
    mlflow = _mlflow()
    span = mlflow.start_span_no_context(name=name, span_type=span_type, parent_span=parent,
                                        inputs=_clip(inputs), attributes=dict(attributes or {}))
    span.end(outputs=_clip(outputs))
    return span


def search_turns(entries: list[Mapping[str, Any]]) -> list[tuple[int, list[Mapping[str, Any]]]]:
    """Group a backend trace into turns: by the entries' ``turn`` (WebDancer), else one turn per entry."""
    turns: dict[int, list[Mapping[str, Any]]] = {}
    for i, entry in enumerate(entries, 1):
        turn = entry.get("turn")
        turns.setdefault(int(turn) if isinstance(turn, int | float) else i, []).append(entry)
    return sorted(turns.items())


def _arm_span(root: Any, arm: str, result: Any, entries: list[Mapping[str, Any]],
              nuggets: Mapping[str, Any]) -> None:
    """An arm: its search (one child per turn, one grandchild per tool call) and its judge."""
    mlflow = _mlflow()
    span = mlflow.start_span_no_context(name=f"{arm} arm", span_type="CHAIN", parent_span=root,
                                        inputs={"query": result.query})
    search = mlflow.start_span_no_context(name="search", span_type="RETRIEVER", parent_span=span,
                                          inputs={"query": result.query})
    for turn, items in search_turns(entries):
        turn_span = mlflow.start_span_no_context(name=f"search turn {turn}", span_type="AGENT", parent_span=search,
                                                 inputs={"turn": turn})
        for item in items:
            name = str(item.get("name") or item.get("tool") or item.get("type") or "step")
            _child(turn_span, f"tool: {name}", "TOOL", {k: v for k, v in item.items() if k != "result"},
                   item.get("result"))
        turn_span.end()
    search.end(outputs={"answer": _clip(result.answer), "answer_rule": result.answer_rule,
                        "end_reason": result.end_reason})
    labels = {nid: {"label": label, **nuggets.get(nid, {})} for nid, label in result.labels.items()}
    _child(span, "judge", "EVALUATOR", {"answer": result.answer, "nuggets": list(nuggets.values())},
           {"labels": labels, "restore_score_100": result.score},
           {f"label.{nid}": label for nid, label in result.labels.items()})
    span.end(outputs={"restore_score_100": result.score, "error": result.error and result.error.message})


def _interaction_spans(root: Any, instance: Any, record: Any) -> None:
    """Clarify (one span per turn in sequential mode), each UA answer, the rewrite."""
    if record.mode == "sequential":
        for i, question in enumerate(record.questions):
            earlier = [{"question": q, "answer": a} for q, a in zip(record.questions[:i], record.answers[:i])]
            _child(root, f"clarify turn {i + 1}", "LLM", {"blurred_query": instance.blurred_query, "k": record.k,
                                                          "earlier": earlier}, {"question": question})
    else:
        _child(root, "clarify", "LLM", {"blurred_query": instance.blurred_query, "k": record.k},
               {"questions": list(record.questions)})
    for i, (question, answer) in enumerate(zip(record.questions, record.answers), 1):
        # The only place the hidden intent appears: the closed-book UA sees it by protocol.
        _child(root, f"ua answer {i}", "LLM", {"fused_query": instance.fused_query, "question": question},
               {"answer": answer})
    if record.answers:
        qa = [{"question": q, "answer": a} for q, a in zip(record.questions, record.answers)]
        _child(root, "rewrite", "LLM", {"blurred_query": instance.blurred_query, "qa": qa},
               {"rewritten_query": record.rewritten_query})


def log_instance_trace(instance: Any, gold: Any, record: Any, traces: list[Mapping[str, Any]],
                       tags: Mapping[str, str] | None = None) -> str:
    """Log one instance's interaction as one MLflow trace (linked to the active run).

    Spans: clarify (per turn when sequential), each UA answer, rewrite, then for the
    clarified and orig arms their search (one span per turn, one per tool call) and
    judge (every nugget's label). ``fused_query`` appears only in the UA spans'
    inputs. Tagged with the instance id, k, mode and the role models.

    Returns:
        The trace id.
    """
    mlflow = _mlflow()
    nuggets = {n.id: {"text": n.text, "weight": n.weight} for n in gold.nuggets}
    arms = [("clarified", record.clarified), ("orig", record.orig)]
    by_arm = {str(t.get("arm")): list(t.get("trace") or []) for t in traces}
    all_tags = {"cts.instance_id": record.id, "cts.k": str(record.k), "cts.mode": record.mode,
                **{f"cts.model.{role}": str(m) for role, m in record.models.items()}, **dict(tags or {})}
    summary = {arm: {"query": r.query, "restore_score_100": r.score, "labels": dict(r.labels)}
               for arm, r in arms if r is not None}
    root = mlflow.start_span_no_context(
        name=f"instance {record.id}", span_type="CHAIN", tags=all_tags,
        inputs={"instance_id": record.id, "blurred_query": instance.blurred_query, "k": record.k,
                "mode": record.mode},
    )
    _interaction_spans(root, instance, record)
    for arm, result in arms:
        if result is not None:  # a clarified arm without its own trace reused the orig search (same query)
            _arm_span(root, arm, result, by_arm.get(arm) or by_arm.get("orig", []), nuggets)
    root.end(outputs={"questions": list(record.questions), "answers": list(record.answers),
                      "rewritten_query": record.rewritten_query, **summary,
                      "error": record.error and f"{record.error.stage}: {record.error.message}"})
    return str(root.trace_id)


def log_records_table(records: Iterable[Any], artifact_file: str = "records_table.json") -> None:
    """Log the records as an MLflow table of the active run (one row per instance).

    ``mlflow.load_table(artifact_file, run_ids=[...], extra_columns=["run_id"])``
    then lines the same instance up across runs.
    """

    rows = [{
        "instance_id": r.id, "k": r.k, "mode": r.mode, "questions": "\n".join(r.questions),
        "answers": "\n".join(r.answers), "rewritten_query": r.rewritten_query or "",
        "score": r.score, "orig_score": r.orig_score,
        "delta": None if r.score is None or r.orig_score is None else r.score - r.orig_score,
        "clarified_labels": json.dumps(dict(r.clarified.labels) if r.clarified else {}, ensure_ascii=False),
        "orig_labels": json.dumps(dict(r.orig.labels) if r.orig else {}, ensure_ascii=False),
        "error": f"{r.error.stage}: {r.error.kind}" if r.error else "",
    } for r in records]
    import pandas as pd

    _mlflow().log_table(pd.DataFrame(rows), artifact_file=artifact_file)
