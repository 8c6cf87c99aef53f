"""One instance's trace as plain data, built from the stage times the pipeline recorded as they happened.

The pipeline's trace lines (``cts.protocol.pipeline.run_instance``) carry when the instance and each
stage ran: ``arm: instance`` (clarify, UA answers, rewrite, qtype), and per arm its search
and judge; a WebDancer search stamps every step (``t_ns``). Spans take those times, so a
span's duration is its stage's, and the trace's is the instance's wall time.

Nothing here calls MLflow: :func:`trace_document` assembles a picklable document that the trace
writer (``cts.tracking._tracewrite``, in a process of its own) turns into an MLflow trace.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cts.compat.job_dirs import timed_trace_line
from cts.core.stages import ANSWER, CLARIFY, JUDGE, REWRITE, SEARCH, added
from cts.tracking._assessments import instance_assessments, label_string

_TEXT_MAX = 4000  # characters of one span value kept in a trace (pages and prompts can be long)
Window = tuple[int, int]
"""``(start_ns, end_ns)``, epoch nanoseconds."""


def clip(value: Any) -> Any:
    """Long strings (visited pages, prompts) cut so one trace stays small."""
    # str, list and tuple before the Mapping ABC: they never reach its (process-wide) cache
    if isinstance(value, str):
        return value if len(value) <= _TEXT_MAX else value[:_TEXT_MAX] + f"... [{len(value) - _TEXT_MAX} more]"
    if isinstance(value, list | tuple):
        return [clip(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): clip(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Span:
    """A span whose start and end are known when it is added (:meth:`SpanTree.span`).

    Attributes:
        name: The span's name (``judge``, ``tool: visit`` ...).
        type: Its MLflow span type (``LLM``, ``TOOL``, ``EVALUATOR`` ...).
        when: Its ``(start_ns, end_ns)``.
        inputs: What it took.
        outputs: What it gave.
        attributes: More to show beside them.
    """

    name: str
    type: str
    when: Window
    inputs: Any = None
    outputs: Any = None
    attributes: Mapping[str, Any] | None = None


class SpanTree:
    """The spans of one trace as plain data, root first: what the trace writer turns into MLflow spans.

    A span is a dict (``name``, ``type``, ``parent`` index or None, ``start_ns``, ``end_ns``,
    ``inputs``, ``outputs``, ``attributes``, ``status``); inputs, and the outputs of :meth:`span`,
    are clipped (:func:`clip`) as they are added. Building it costs no MLflow call: the job's process only assembles data.
    """

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    def open(
        self,
        parent: int | None,
        name: str,
        span_type: str,
        start_ns: int,
        inputs: Any = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> int:
        """Start a span; returns its index (the parent of the spans opened under it)."""
        self.spans.append(
            {
                "name": name,
                "type": span_type,
                "parent": parent,
                "start_ns": int(start_ns),
                "end_ns": int(start_ns),
                "inputs": clip(inputs),
                "outputs": None,
                "attributes": dict(attributes or {}),
                "status": "OK",
            }
        )
        return len(self.spans) - 1

    def end(self, index: int, end_ns: int, outputs: Any = None, status: str = "OK") -> None:
        """End a span at ``end_ns`` with its outputs and status (``OK`` or ``ERROR``)."""
        self.spans[index].update(end_ns=int(end_ns), outputs=outputs, status=status)

    def span(self, parent: int | None, span: Span) -> int:
        """Add ``span`` (start and end known) under ``parent``; returns its index."""
        index = self.open(parent, span.name, span.type, span.when[0], span.inputs, span.attributes)
        self.end(index, span.when[1], clip(span.outputs))
        return index


def _window(stage: Mapping[str, Any] | None, default: Window) -> Window:
    if not stage:
        return default
    return int(stage["start_ns"]), max(int(stage["end_ns"]), int(stage["start_ns"]))


# ----------------------------------------------------------------------------- search turns


def search_turns(entries: Sequence[Mapping[str, Any]]) -> list[tuple[int, list[Mapping[str, Any]]]]:
    """Group a backend trace into turns by the entries' ``turn`` (WebDancer), else one turn per entry.

    An entry without a turn amid turned ones (the prompt, the end) joins the turn beside it.
    """
    turned = any(isinstance(e.get("turn"), int | float) for e in entries)
    turns: dict[int, list[Mapping[str, Any]]] = {}
    current = 1
    for i, entry in enumerate(entries, 1):
        turn = entry.get("turn")
        if isinstance(turn, int | float):
            current = int(turn)
        elif not turned:
            current = i
        turns.setdefault(current, []).append(entry)
    return sorted(turns.items())


def _start_of(entry: Mapping[str, Any]) -> int | None:
    if "t_ns" not in entry:
        return None
    return int(entry["t_ns"] - float(entry.get("latency_s") or 0.0) * 1e9)  # an LLM step is stamped as it ends


def _turn_window(items: Sequence[Mapping[str, Any]], search: Window) -> Window:
    starts = [s for s in map(_start_of, items) if s is not None]
    if not starts:
        return search  # an unstamped backend: the turn takes the search's time
    return max(min(starts), search[0]), min(max(int(e["t_ns"]) for e in items if "t_ns" in e), search[1])


def _steps(items: Sequence[Mapping[str, Any]], turn: Window) -> Iterator[Span]:
    """A span per step: a tool call with its result, an LLM turn ..."""
    pending: dict[str, Mapping[str, Any]] = {}
    for item in items:
        kind, name = str(item.get("type") or ""), str(item.get("name") or item.get("tool") or "")
        at = int(item.get("t_ns") or turn[1])
        if kind == "tool_call":
            pending[name] = item
            continue
        if kind == "tool_result" and name in pending:
            call = pending.pop(name)
            yield Span(f"tool: {name}", "TOOL", (int(call.get("t_ns") or turn[0]), at), _inputs(call), _inputs(item))
        elif kind == "llm":
            yield Span("agent llm", "LLM", (_start_of(item) or turn[0], at), None, _inputs(item))
        elif not kind:  # a backend's single step (extractive search, a test's table)
            yield Span(
                f"tool: {name or 'search'}",
                "TOOL",
                turn,
                _inputs(item, drop=("result", "hits")),
                item.get("result", item.get("hits")),
            )
        else:
            yield Span(f"step: {kind}", "UNKNOWN", (at, at), None, _inputs(item))
    for name, call in pending.items():  # a call whose result never came (the run stopped)
        yield Span(f"tool: {name}", "TOOL", (int(call.get("t_ns") or turn[0]), turn[1]), _inputs(call), None)


def _inputs(item: Mapping[str, Any], drop: Sequence[str] = ()) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("t_ns", *drop)}


def _search_span(tree: SpanTree, arm: int, result: Any, entries: Sequence[Mapping[str, Any]], when: Window) -> None:
    search = tree.open(arm, "search", "RETRIEVER", when[0], {"query": result.query})
    for turn, items in search_turns(entries):
        window = _turn_window(items, when)
        turn_span = tree.open(search, f"search turn {turn}", "AGENT", window[0], {"turn": turn})
        for step in _steps(items, window):
            tree.span(turn_span, step)
        tree.end(turn_span, window[1])
    outputs = {"answer": clip(result.answer), "answer_rule": result.answer_rule, "end_reason": result.end_reason}
    tree.end(search, when[1], outputs)


# ----------------------------------------------------------------------------- arms and interaction


def _arm_span(
    tree: SpanTree,
    arm: str,
    result: Any,
    line: Mapping[str, Any],
    nuggets: Mapping[str, Any],
    default: Window,
    reused: bool,
) -> None:
    """An arm: its search (one child per turn, one grandchild per step) and its judge, at their times."""
    stages = {s["stage"]: s for s in line.get("stages") or []}
    search = _window(stages.get(SEARCH.span), default)
    judge = _window(stages.get(JUDGE.span), (search[1], search[1]))
    when = (search[0], max(search[1], judge[1]) if JUDGE.span in stages else search[1])
    span = tree.open(
        0, f"{arm} arm", "CHAIN", when[0], {"query": result.query}, {"reuses": "orig arm"} if reused else None
    )
    _search_span(tree, span, result, list(line.get("trace") or []), search)
    if JUDGE.span in stages:
        labels = {nid: {"label": label, **nuggets.get(nid, {})} for nid, label in result.labels.items()}
        tree.span(
            span,
            Span(
                "judge",
                "EVALUATOR",
                judge,
                {"answer": result.answer, "nuggets": list(nuggets.values())},
                {"labels": labels, "restore_score_100": result.score},
                {f"label.{nid}": label for nid, label in result.labels.items()},
            ),
        )
    outputs = {"restore_score_100": result.score, "error": result.error and result.error.message}
    tree.end(span, when[1], outputs, "ERROR" if result.error else "OK")


def _stage_io(name: str, instance: Any, record: Any) -> tuple[str, Any, Any]:
    """The span type, inputs and outputs of an interaction stage (``clarify turn 2``, ``ua answer 1`` ...)."""
    qs, answers = list(record.questions), list(record.answers)
    head, _, n = name.rpartition(" ")
    i = int(n) - 1 if n.isdigit() else 0
    qa = [{"question": q, "answer": a} for q, a in zip(qs, answers)]
    if name == CLARIFY.span:
        return "LLM", {"blurred_query": instance.blurred_query, "k": record.k}, {"questions": qs}
    if head == f"{CLARIFY.span} turn":
        return (
            "LLM",
            {"blurred_query": instance.blurred_query, "k": record.k, "earlier": qa[:i]},
            {"question": qs[i] if i < len(qs) else None},
        )
    if head == ANSWER.span:  # the only place the hidden intent appears: the closed-book UA sees it by protocol
        return (
            "LLM",
            {"fused_query": instance.fused_query, "question": qs[i] if i < len(qs) else None},
            {"answer": answers[i] if i < len(answers) else None},
        )
    if name == REWRITE.span:
        return "LLM", {"blurred_query": instance.blurred_query, "qa": qa}, {"rewritten_query": record.rewritten_query}
    if declared := next((s for s in added() if s.span == name), None):  # a refiner of the clarified query
        searched = record.clarified.query if record.clarified else None
        return declared.span_type, {"query": record.rewritten_query}, {declared.output: searched}
    return "PARSER", {"questions": qs}, {"question_types": [list(t) for t in record.question_types]}


def _interaction_spans(tree: SpanTree, instance: Any, record: Any, stages: Sequence[Mapping[str, Any]]) -> None:
    """Clarify (one span per turn in sequential mode), each UA answer, the rewrite, question typing."""
    for stage in sorted(stages, key=lambda s: (s["start_ns"], s["end_ns"])):
        span_type, inputs, outputs = _stage_io(str(stage["stage"]), instance, record)
        tree.span(0, Span(str(stage["stage"]), span_type, _window(stage, (0, 0)), inputs, outputs))


def _root_window(line: Mapping[str, Any] | None, record: Any) -> Window:
    timed = timed_trace_line(line, record.elapsed_s)
    return int(timed["start_ns"]), int(timed["end_ns"])


def trace_id_for(run_id: str, instance_id: str, repeat: int = 0) -> str:
    """The trace id of an instance's run in a job's MLflow run: the same on every resume, so never written twice."""
    digest = hashlib.sha256(f"cts-trace\0{run_id}\0{instance_id}\0{repeat}".encode()).hexdigest()
    return f"tr-{digest[:32]}"


def trace_document(
    instance: Any,
    gold: Any,
    record: Any,
    traces: Sequence[Mapping[str, Any]],
    tags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One instance's interaction as a trace document (no ids yet: :func:`cts.tracking.InstanceTraces` sets them).

    Spans, at the times the stages ran: clarify (per turn when sequential), each UA answer,
    rewrite, question typing, then the clarified and orig arms with their search (one span
    per turn, one per step) and judge (every nugget's label). ``fused_query`` appears only in
    the UA spans' inputs. The root's inputs are the same for an instance in every job, so
    MLflow pairs the traces of two runs by instance. Tagged with the instance id, k, mode and
    the role models; assessed with :func:`cts.tracking._assessments.instance_assessments`.

    Returns:
        ``{"tags", "spans", "assessments", "instance_id", "repeat"}``; the root span is ``spans[0]``.
    """
    nuggets = {n.id: {"text": n.text, "weight": n.weight} for n in gold.nuggets}
    lines = {str(t.get("arm")): t for t in traces}
    when = _root_window(lines.get("instance"), record)
    all_tags = {
        "cts.instance_id": record.id,
        "cts.k": str(record.k),
        "cts.mode": record.mode,
        **{f"cts.model.{role}": str(m) for role, m in record.models.items()},
        **{k: v for k, v in (tags or {}).items() if v},
    }
    tree = SpanTree()
    root = tree.open(
        None,
        f"instance {record.id}",
        "CHAIN",
        when[0],
        {"instance_id": record.id, "blurred_query": instance.blurred_query},
        {"k": record.k, "mode": record.mode, "elapsed_s": record.elapsed_s},
    )
    _interaction_spans(tree, instance, record, (lines.get("instance") or {}).get("stages") or [])
    for arm, result in (("clarified", record.clarified), ("orig", record.orig)):
        if result is not None:  # a clarified arm without its own line reused the orig search (same query)
            line = lines.get(arm) or lines.get("orig") or {}
            _arm_span(tree, arm, result, line, nuggets, when, reused=arm not in lines)
    tree.end(root, when[1], _summary(record), "ERROR" if record.error else "OK")
    return {
        "instance_id": record.id,
        "repeat": int(getattr(record, "repeat", 0) or 0),
        "tags": all_tags,
        "spans": tree.spans,
        "assessments": instance_assessments(record, gold),
    }


def pending_document(
    instance: Any,
    gold: Any,
    record: Any,
    traces: Sequence[Mapping[str, Any]],
    tags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What the job's process hands its trace writer for one instance: :func:`trace_document`'s arguments.

    The writer's process builds the spans (:func:`built_document`), so the job's event loop does
    not (about 0.2 ms an instance). The instance, gold and record are frozen, and the pipeline
    hands each instance's trace lines to the hook once, as it commits them, and keeps none.
    """
    return {
        "instance_id": record.id,
        "repeat": int(getattr(record, "repeat", 0) or 0),
        "pending": (instance, gold, record, list(traces), dict(tags or {})),
    }


def built_document(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """``doc`` with its spans, tags and assessments: a :func:`pending_document` built now; a built one as it is."""
    if "pending" not in doc:
        return doc
    ids = {k: v for k, v in doc.items() if k != "pending"}
    return {**trace_document(*doc["pending"]), **ids}


def _summary(record: Any) -> dict[str, Any]:
    """The trace's outputs: what a reader checks first (the labels also as one line), then both arms."""
    arms = {
        arm: {"query": r.query, "restore_score_100": r.score, "labels": dict(r.labels)}
        for arm, r in (("clarified", record.clarified), ("orig", record.orig))
        if r is not None
    }
    labels = label_string(record.clarified.labels) if record.clarified else ""
    return {
        "questions": list(record.questions),
        "answers": list(record.answers),
        "rewritten_query": record.rewritten_query,
        "nugget_labels": labels,
        **arms,
        "error": record.error and f"{record.error.stage}: {record.error.message}",
    }
