"""One MLflow trace per instance, built from the stage times the pipeline recorded as they happened.

The pipeline's trace lines (``cts.protocol.pipeline.run_instance``) carry when the instance and each
stage ran: ``arm: instance`` (clarify, UA answers, rewrite, qtype), and per arm its search
and judge; a WebDancer search stamps every step (``t_ns``). Spans take those times, so a
span's duration is its stage's, and the trace's is the instance's wall time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from cts.tracking._assessments import (
    instance_assessments,
    label_string,
    log_assessments,
)
from cts.tracking._store import mlflow_module

log = logging.getLogger(__name__)

_TEXT_MAX = 4000  # characters of one span value kept in a trace (pages and prompts can be long)
Window = tuple[int, int]
"""``(start_ns, end_ns)``, epoch nanoseconds."""


def clip(value: Any) -> Any:
    """Long strings (visited pages, prompts) cut so one trace stays small."""
    if isinstance(value, str):
        return value if len(value) <= _TEXT_MAX else value[:_TEXT_MAX] + f"... [{len(value) - _TEXT_MAX} more]"
    if isinstance(value, Mapping):
        return {str(k): clip(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clip(v) for v in value]
    return value


def _open(
    parent: Any,
    name: str,
    span_type: str,
    start_ns: int,
    inputs: Any = None,
    attributes: Mapping[str, Any] | None = None,
) -> Any:
    return mlflow_module().start_span_no_context(
        name=name,
        span_type=span_type,
        parent_span=parent,
        inputs=clip(inputs),
        attributes=dict(attributes or {}),
        start_time_ns=start_ns,
    )


def _span(
    parent: Any,
    name: str,
    span_type: str,
    when: Window,
    inputs: Any,
    outputs: Any,
    attributes: Mapping[str, Any] | None = None,
) -> None:
    _open(parent, name, span_type, when[0], inputs, attributes).end(outputs=clip(outputs), end_time_ns=when[1])


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


def _steps(items: Sequence[Mapping[str, Any]], turn: Window) -> Iterator[tuple[str, str, Window, Any, Any]]:
    """``(name, span type, window, inputs, outputs)`` per step: a tool call with its result, an LLM turn ..."""
    pending: dict[str, Mapping[str, Any]] = {}
    for item in items:
        kind, name = str(item.get("type") or ""), str(item.get("name") or item.get("tool") or "")
        at = int(item.get("t_ns") or turn[1])
        if kind == "tool_call":
            pending[name] = item
            continue
        if kind == "tool_result" and name in pending:
            call = pending.pop(name)
            yield f"tool: {name}", "TOOL", (int(call.get("t_ns") or turn[0]), at), _inputs(call), _inputs(item)
        elif kind == "llm":
            yield "agent llm", "LLM", (_start_of(item) or turn[0], at), None, _inputs(item)
        elif not kind:  # a backend's single step (extractive search, a test's table)
            yield (
                f"tool: {name or 'search'}",
                "TOOL",
                turn,
                _inputs(item, drop=("result", "hits")),
                item.get("result", item.get("hits")),
            )
        else:
            yield f"step: {kind}", "UNKNOWN", (at, at), None, _inputs(item)
    for name, call in pending.items():  # a call whose result never came (the run stopped)
        yield f"tool: {name}", "TOOL", (int(call.get("t_ns") or turn[0]), turn[1]), _inputs(call), None


def _inputs(item: Mapping[str, Any], drop: Sequence[str] = ()) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("t_ns", *drop)}


def _search_span(arm_span: Any, result: Any, entries: Sequence[Mapping[str, Any]], when: Window) -> None:
    search = _open(arm_span, "search", "RETRIEVER", when[0], {"query": result.query})
    for turn, items in search_turns(entries):
        window = _turn_window(items, when)
        turn_span = _open(search, f"search turn {turn}", "AGENT", window[0], {"turn": turn})
        for name, span_type, step, inputs, outputs in _steps(items, window):
            _span(turn_span, name, span_type, step, inputs, outputs)
        turn_span.end(end_time_ns=window[1])
    search.end(
        outputs={"answer": clip(result.answer), "answer_rule": result.answer_rule, "end_reason": result.end_reason},
        end_time_ns=when[1],
    )


# ----------------------------------------------------------------------------- arms and interaction


def _arm_span(
    root: Any, arm: str, result: Any, line: Mapping[str, Any], nuggets: Mapping[str, Any], default: Window, reused: bool
) -> None:
    """An arm: its search (one child per turn, one grandchild per step) and its judge, at their times."""
    stages = {s["stage"]: s for s in line.get("stages") or []}
    search = _window(stages.get("search"), default)
    judge = _window(stages.get("judge"), (search[1], search[1]))
    when = (search[0], max(search[1], judge[1]) if "judge" in stages else search[1])
    span = _open(
        root, f"{arm} arm", "CHAIN", when[0], {"query": result.query}, {"reuses": "orig arm"} if reused else None
    )
    _search_span(span, result, list(line.get("trace") or []), search)
    if "judge" in stages:
        labels = {nid: {"label": label, **nuggets.get(nid, {})} for nid, label in result.labels.items()}
        _span(
            span,
            "judge",
            "EVALUATOR",
            judge,
            {"answer": result.answer, "nuggets": list(nuggets.values())},
            {"labels": labels, "restore_score_100": result.score},
            {f"label.{nid}": label for nid, label in result.labels.items()},
        )
    span.end(
        outputs={"restore_score_100": result.score, "error": result.error and result.error.message},
        end_time_ns=when[1],
        status="ERROR" if result.error else "OK",
    )


def _stage_io(name: str, instance: Any, record: Any) -> tuple[str, Any, Any]:
    """The span type, inputs and outputs of an interaction stage (``clarify turn 2``, ``ua answer 1`` ...)."""
    qs, answers = list(record.questions), list(record.answers)
    head, _, n = name.rpartition(" ")
    i = int(n) - 1 if n.isdigit() else 0
    qa = [{"question": q, "answer": a} for q, a in zip(qs, answers)]
    if name == "clarify":
        return "LLM", {"blurred_query": instance.blurred_query, "k": record.k}, {"questions": qs}
    if head == "clarify turn":
        return (
            "LLM",
            {"blurred_query": instance.blurred_query, "k": record.k, "earlier": qa[:i]},
            {"question": qs[i] if i < len(qs) else None},
        )
    if head == "ua answer":  # the only place the hidden intent appears: the closed-book UA sees it by protocol
        return (
            "LLM",
            {"fused_query": instance.fused_query, "question": qs[i] if i < len(qs) else None},
            {"answer": answers[i] if i < len(answers) else None},
        )
    if name == "rewrite":
        return "LLM", {"blurred_query": instance.blurred_query, "qa": qa}, {"rewritten_query": record.rewritten_query}
    return "PARSER", {"questions": qs}, {"question_types": [list(t) for t in record.question_types]}


def _interaction_spans(root: Any, instance: Any, record: Any, stages: Sequence[Mapping[str, Any]]) -> None:
    """Clarify (one span per turn in sequential mode), each UA answer, the rewrite, question typing."""
    for stage in sorted(stages, key=lambda s: (s["start_ns"], s["end_ns"])):
        span_type, inputs, outputs = _stage_io(str(stage["stage"]), instance, record)
        _span(root, str(stage["stage"]), span_type, _window(stage, (0, 0)), inputs, outputs)


def _root_window(line: Mapping[str, Any] | None, record: Any) -> Window:
    if line and "start_ns" in line:
        return int(line["start_ns"]), int(line["end_ns"])
    import time

    end = time.time_ns()  # a trace line without times (written by an older version): end now
    return end - int(record.elapsed_s * 1e9), end


def log_instance_trace(
    instance: Any,
    gold: Any,
    record: Any,
    traces: Sequence[Mapping[str, Any]],
    tags: Mapping[str, str] | None = None,
    run: tuple[str, str] | None = None,
) -> str:
    """Log one instance's interaction as one MLflow trace (linked to the active run), with its assessments.

    Spans, at the times the stages ran: clarify (per turn when sequential), each UA answer,
    rewrite, question typing, then the clarified and orig arms with their search (one span
    per turn, one per step) and judge (every nugget's label). ``fused_query`` appears only in
    the UA spans' inputs. The root's inputs are the same for an instance in every job, so
    MLflow pairs the traces of two runs by instance. Tagged with the instance id, k, mode and
    the role models; assessed with :func:`cts.tracking._assessments.instance_assessments`.

    Args:
        run: ``(run id, experiment id)`` the trace belongs to (default: this thread's active run).

    Returns:
        The trace id.
    """
    mlflow = mlflow_module()
    from mlflow.tracing.provider import safe_set_span_in_context

    nuggets = {n.id: {"text": n.text, "weight": n.weight} for n in gold.nuggets}
    lines = {str(t.get("arm")): t for t in traces}
    when = _root_window(lines.get("instance"), record)
    all_tags = {
        "cts.instance_id": record.id,
        "cts.k": str(record.k),
        "cts.mode": record.mode,
        **{f"cts.model.{role}": str(m) for role, m in record.models.items()},
        **{k: v for k, v in (tags or {}).items() if v},
    }  # each tag is one more store write
    root = mlflow.start_span_no_context(
        name=f"instance {record.id}",
        span_type="CHAIN",
        tags=all_tags,
        start_time_ns=when[0],
        metadata={"mlflow.sourceRun": run[0]} if run else None,
        experiment_id=run[1] if run else None,
        inputs={"instance_id": record.id, "blurred_query": instance.blurred_query},
        attributes={"k": record.k, "mode": record.mode, "elapsed_s": record.elapsed_s},
    )
    _interaction_spans(root, instance, record, (lines.get("instance") or {}).get("stages") or [])
    for arm, result in (("clarified", record.clarified), ("orig", record.orig)):
        if result is not None:  # a clarified arm without its own line reused the orig search (same query)
            line = lines.get(arm) or lines.get("orig") or {}
            _arm_span(root, arm, result, line, nuggets, when, reused=arm not in lines)
    with safe_set_span_in_context(root):  # the active trace: assessments are written with it, in one go
        log_assessments(root.trace_id, instance_assessments(record, gold))
    root.end(outputs=_summary(record), end_time_ns=when[1], status="ERROR" if record.error else "OK")
    return str(root.trace_id)


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


class InstanceTraces:
    """The per-instance hook of one job (``on_instance``): each committed instance becomes a trace of its run.

    Instances that finish before the job's run exists (a sweep starts them while its jobs set
    up) wait in memory and are logged by :meth:`attach`; later ones are logged as they commit,
    from whichever thread commits them (the run is named, not taken from the thread).
    """

    def __init__(self, tags: Mapping[str, str] | None = None) -> None:
        self.tags = dict(tags or {})
        self.trace_ids: dict[str, str] = {}
        """Instance id -> its trace id (this invocation's instances)."""
        self._run: tuple[str, str] | None = None
        self._waiting: list[tuple[Any, Any, Any, Sequence[Mapping[str, Any]]]] = []
        self._lock = threading.Lock()

    def __call__(self, instance: Any, gold: Any, record: Any, traces: Sequence[Mapping[str, Any]]) -> None:
        """Log the instance's trace, or keep it until the run exists."""
        with self._lock:
            if self._run is None:
                self._waiting.append((instance, gold, record, traces))
                return
        self._log(instance, gold, record, traces)

    def attach(self, run_id: str) -> None:
        """The job's run exists: log the instances that waited for it; trace the next ones as they commit."""
        run = (run_id, mlflow_module().get_run(run_id).info.experiment_id)
        with self._lock:
            self._run = run
            waiting, self._waiting = self._waiting, []
        for item in waiting:
            try:
                self._log(*item)
            except Exception:  # noqa: BLE001 - observability must not stop the job
                log.exception("per-instance trace failed for %s", item[2].id)

    def _log(self, instance: Any, gold: Any, record: Any, traces: Sequence[Mapping[str, Any]]) -> None:
        self.trace_ids[record.id] = log_instance_trace(instance, gold, record, traces, self.tags, self._run)
