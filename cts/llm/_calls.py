"""What one LLM call is: its route, its pending state, its completion and the event listeners see."""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from cts._util.secrets import remember
from cts.core.contracts import Completion, Route
from cts.llm._pricing import Prices, call_cost
from cts.llm._settings import LLMSettings
from cts.llm._spec import ModelSpec
from cts.llm._usage import CallUsage

log = logging.getLogger(__name__)
_DUMMY_KEY = "sk-no-key-needed"  # OpenAI-compatible servers without auth still want a key field
T = TypeVar("T")
# Requests sent and not yet answered, per event loop (see settled()).
IN_FLIGHT: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[asyncio.Future[Any]]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class CallEvent:
    """One finished ``complete`` call, handed to listeners (e.g. MLflow tracing)."""

    role: str
    spec_name: str
    model: str
    api_base: str | None
    messages: tuple[Mapping[str, str], ...]
    params: Mapping[str, Any]
    prompt_version: str
    text: str
    tokens_in: int
    tokens_out: int
    cost_usd: float
    cached: bool
    latency_s: float
    error: str | None
    """The CallError kind when the call failed for good."""
    started_at: float
    """``time.time()`` when the call started."""
    finish_reason: str = ""
    tokens_reasoning: int = 0


Listener = Callable[[CallEvent], None]


class Caller(Protocol):
    """Who makes a call: a model for a role (a :class:`~cts.llm._client.ChatClient`)."""

    spec: ModelSpec
    role: str


@dataclass
class PendingCall:
    """Mutable state of one ``complete`` call while it runs."""

    client: Caller
    route: Route
    messages: list[dict[str, str]]
    params: dict[str, Any]
    version: str
    started_at: float
    requests: int = 0
    completion: Completion | None = None
    error: str | None = None
    saved_usd: float = 0.0
    cache_key: str = ""


def call_usage(call: PendingCall, latency: float) -> CallUsage:
    """What a finished call books: tokens and cost only for a completion this call paid for."""
    done = call.completion
    fresh = done is not None and not done.cached
    return CallUsage(
        cached=done is not None and done.cached,
        failed=call.error is not None,
        requests=call.requests,
        tokens_in=done.tokens_in if done is not None and fresh else 0,
        tokens_out=done.tokens_out if done is not None and fresh else 0,
        cost_usd=done.cost_usd if done is not None and fresh else 0.0,
        latency_s=latency,
        saved_usd=call.saved_usd,
        tokens_reasoning=done.tokens_reasoning if done is not None and fresh else 0,
        truncated=done is not None and done.truncated,
    )


def orphan_usage(reply: Completion) -> CallUsage:
    """What a reply that landed after its caller was cancelled books: its tokens and cost, no new call."""
    return CallUsage(
        cached=False,
        failed=False,
        requests=0,
        tokens_in=reply.tokens_in,
        tokens_out=reply.tokens_out,
        cost_usd=reply.cost_usd,
        latency_s=0.0,
        new_call=False,
        tokens_reasoning=reply.tokens_reasoning,
    )


def call_event(call: PendingCall, latency: float) -> CallEvent:
    """The listeners' view of a finished call."""
    done = call.completion or Completion("", 0, 0, 0.0, False, 0.0)
    return CallEvent(
        role=call.client.role,
        spec_name=call.client.spec.name,
        model=call.route.model,
        api_base=call.route.api_base,
        messages=tuple(call.messages),
        params=dict(call.params),
        prompt_version=call.version,
        text=done.text,
        tokens_in=done.tokens_in,
        tokens_out=done.tokens_out,
        cost_usd=done.cost_usd,
        cached=done.cached,
        latency_s=latency,
        error=call.error,
        started_at=call.started_at,
        finish_reason=done.finish_reason,
        tokens_reasoning=done.tokens_reasoning,
    )


def route_for(spec: ModelSpec, settings: LLMSettings) -> Route:
    """Apply the global ``api_base``/``served_name`` overrides to ``spec``."""
    if settings.api_base:
        # One OpenAI-compatible endpoint serves every role: drop the provider prefix.
        served = settings.served_name or spec.id.split("/", 1)[-1]
        model = f"openai/{served}"
        token = settings.api_key or _DUMMY_KEY
        remember(token)  # masked wherever a provider echoes it (error bodies, logs)
        return Route(model, settings.api_base, token, settings.api_base, settings.concurrency_per_endpoint)
    key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    remember(key)
    missing = spec.api_key_env if spec.api_key_env and not key else None
    if key is None and spec.api_base and not missing:
        key = _DUMMY_KEY
    limit = spec.max_concurrency or settings.concurrency_per_endpoint
    return Route(spec.id, spec.api_base, key, spec.api_base or spec.provider, limit, missing, spec.min_concurrency)


def cache_value(completion: Completion) -> dict[str, Any]:
    """What the response cache stores of a completion (no latency, no cache flag)."""
    return {
        "text": completion.text,
        "tokens_in": completion.tokens_in,
        "tokens_out": completion.tokens_out,
        "cost_usd": completion.cost_usd,
        "reasoning": completion.reasoning,
        "finish_reason": completion.finish_reason,
        "tokens_reasoning": completion.tokens_reasoning,
    }


def completion_of(prices: Prices, response: Any) -> Completion:
    """The :class:`Completion` of a provider ``response``, priced at ``prices``.

    ``completion_tokens`` includes the reasoning tokens (OpenAI's convention, to which
    litellm maps Anthropic's and Gemini's usage), so reasoning is priced as output.
    """
    choice = response.choices[0] if getattr(response, "choices", None) else None
    message = getattr(choice, "message", None)
    text = (getattr(message, "content", None) or "") if message is not None else ""
    reasoning = (getattr(message, "reasoning_content", None) or "") if message is not None else ""
    usage = getattr(response, "usage", None)
    tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
    tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
    details = getattr(usage, "completion_tokens_details", None)
    tokens_reasoning = int(getattr(details, "reasoning_tokens", 0) or 0)
    cost = call_cost(prices, tokens_in, tokens_out)
    finish = str(getattr(choice, "finish_reason", None) or "")
    return Completion(text, tokens_in, tokens_out, cost, False, 0.0, str(reasoning), finish, tokens_reasoning)


def cached_completion(value: Mapping[str, Any]) -> Completion:
    """A completion served from the cache (nothing billed to this call)."""
    return Completion(
        value["text"],
        value["tokens_in"],
        value["tokens_out"],
        0.0,
        True,
        0.0,
        value.get("reasoning", ""),
        value.get("finish_reason", ""),
        int(value.get("tokens_reasoning", 0) or 0),
    )


async def settled(job: Awaitable[T], timeout_s: float = 120.0) -> T:
    """Await ``job``, then the requests it left in flight, so their cost is booked.

    Requests whose caller was cancelled (see ``LLMRuntime._paid``) would otherwise
    be cancelled when the event loop closes, paid but never counted. Only a job
    that returned is settled: an exception (Ctrl-C included) propagates at once.

    Args:
        job: The job's coroutine.
        timeout_s: Longest wait for the stragglers (one request timeout).
    """
    result = await job
    pending = IN_FLIGHT.get(asyncio.get_running_loop())
    if pending:
        await asyncio.wait(set(pending), timeout=timeout_s)
        await asyncio.sleep(0)  # let the done callbacks book them
    return result
