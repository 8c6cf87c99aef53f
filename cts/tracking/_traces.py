"""MLflow traces of LLM calls (``services.llm.tracing``); per-instance traces are in ``_instance``."""

from __future__ import annotations

import contextvars
import time
from typing import Any

from cts.tracking._store import mlflow_module

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
    mlflow = mlflow_module()
    end = time.time_ns()
    span = mlflow.start_span_no_context(
        name=f"{event.role}:{event.spec_name}",
        span_type="LLM",
        inputs={"messages": list(event.messages), "params": dict(event.params)},
        attributes={
            "role": event.role,
            "model": event.model,
            "prompt_version": event.prompt_version,
            "tokens_in": event.tokens_in,
            "tokens_out": event.tokens_out,
            "cost_usd": event.cost_usd,
            "cached": event.cached,
        },
        start_time_ns=end - int(event.latency_s * 1e9),
    )
    span.end(
        outputs={"text": event.text, "error": event.error}, end_time_ns=end, status="ERROR" if event.error else "OK"
    )
