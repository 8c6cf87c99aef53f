"""The job's LLM runtime: routing, response cache, retries, limits and accounting."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from cts.llm._lite import litellm_module
from cts.llm._pricing import call_cost, register_prices
from cts.llm._retry import classify
from cts.llm._settings import LLMSettings
from cts.llm._spec import ModelSpec
from cts.llm._transport import Sender
from cts.llm._usage import CallUsage, Usage, add_call, add_to_scopes
from cts.llm.cache import ResponseCache
from cts.types import BudgetExceeded, CallError

_DUMMY_KEY = "sk-no-key-needed"  # OpenAI-compatible servers without auth still want a key field


@dataclass(frozen=True)
class Completion:
    """One model reply and what it cost."""

    text: str
    tokens_in: int
    tokens_out: int
    cost_usd: float
    """USD billed to this job (0 for a cache hit)."""
    cached: bool
    latency_s: float
    reasoning: str = ""
    """Reasoning the provider returned apart from ``text`` (litellm moves ``<think>`` blocks here)."""


@dataclass(frozen=True)
class Route:
    """Where a spec's calls go after the global overrides."""

    model: str
    api_base: str | None
    api_key: str | None
    endpoint: str
    """Concurrency-limit key: the api_base, or the provider for hosted APIs."""
    limit: int
    missing_key: str | None = None
    """Name of the unset key variable, if any (raised only when a request is due)."""


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


Listener = Callable[[CallEvent], None]


@dataclass
class _Call:
    """Mutable state of one ``complete`` call while it runs."""

    client: ChatClient
    route: Route
    messages: list[dict[str, str]]
    params: dict[str, Any]
    version: str
    started_at: float
    requests: int = 0
    completion: Completion | None = None
    error: str | None = None
    saved_usd: float = 0.0


def route_for(spec: ModelSpec, settings: LLMSettings) -> Route:
    """Apply the global ``api_base``/``model`` overrides to ``spec``."""
    if settings.api_base:
        # One OpenAI-compatible endpoint serves every role: drop the provider prefix.
        served = settings.model or spec.model.split("/", 1)[-1]
        model = f"openai/{served}"
        token = settings.api_key or _DUMMY_KEY
        return Route(model, settings.api_base, token, settings.api_base, settings.concurrency_per_endpoint)
    key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    missing = spec.api_key_env if spec.api_key_env and not key else None
    if key is None and spec.api_base and not missing:
        key = _DUMMY_KEY
    limit = spec.max_concurrency or settings.concurrency_per_endpoint
    return Route(spec.model, spec.api_base, key, spec.api_base or spec.provider, limit, missing)


class ChatClient:
    """Calls one model for one role through the runtime (cache, retries, accounting)."""

    def __init__(self, runtime: LLMRuntime, spec: ModelSpec, role: str) -> None:
        self.runtime = runtime
        self.spec = spec
        self.role = role

    async def complete(
        self, messages: list[dict[str, str]], *, prompt_version: str = "", **params: Any
    ) -> Completion:
        """Return the model's reply to ``messages``.

        Args:
            messages: OpenAI-style chat messages.
            prompt_version: Hash of the prompt template (part of the cache key).
            **params: Decoding params overriding the spec's.

        Raises:
            CallError: The call failed for good (``kind``: rate_limit, timeout, ...).
            BudgetExceeded: The job's ``budget.max_usd`` is spent (checked before sending).
        """
        return await self.runtime._complete(self, messages, prompt_version, params)


class LLMRuntime:
    """Per-job LLM runtime shared by every role (one per ``Services``)."""

    def __init__(self, settings: LLMSettings, cache: ResponseCache) -> None:
        self.settings = settings
        self.cache = cache
        self._usage: Usage = {}
        self._spent = 0.0
        self._limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]]
        self._limits = weakref.WeakKeyDictionary()
        self._registered: set[str] = set()
        self._listeners: list[Listener] = []
        self._sender = Sender(settings.transport)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], cache_dir: Path) -> LLMRuntime:
        """Build the runtime from ``cfg.services.llm``.

        Args:
            settings: The ``services.llm`` mapping.
            cache_dir: Default home of ``llm_cache.sqlite`` (when ``cache.path`` is null).
        """
        parsed = LLMSettings.from_mapping(settings)
        path = parsed.cache_path or Path(cache_dir) / "llm_cache.sqlite"
        return cls(parsed, ResponseCache(path, parsed.cache_mode))

    def client(self, spec: ModelSpec | Mapping[str, Any], role: str) -> ChatClient:
        """A client that calls ``spec`` and books usage under ``role``."""
        spec = ModelSpec.coerce(spec)
        model = route_for(spec, self.settings).model
        if model not in self._registered:
            self._registered.add(model)
            register_prices(litellm_module(), spec, model)
        return ChatClient(self, spec, role)

    def usage(self) -> Usage:
        """Per-role totals for the whole job (see ``cts.llm._usage.USAGE_KEYS``)."""
        return copy.deepcopy(self._usage)

    @property
    def spent_usd(self) -> float:
        """USD billed so far in this job."""
        return self._spent

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` after every call (used for optional tracing)."""
        self._listeners.append(listener)

    async def _complete(
        self, client: ChatClient, messages: list[dict[str, str]], version: str, params: Mapping[str, Any]
    ) -> Completion:
        start = time.perf_counter()
        call = _Call(
            client,
            route_for(client.spec, self.settings),
            messages,
            {**client.spec.params, **params},
            version,
            time.time(),
        )
        key = self.cache.key(
            {
                "api_base": call.route.api_base,
                "model": call.route.model,
                "messages": messages,
                "params": call.params,
                "prompt_version": version,
            }
        )
        try:
            hit = await self._cache_get(key)
            if hit is not None:
                call.completion = Completion(
                    hit["text"], hit["tokens_in"], hit["tokens_out"], 0.0, True, 0.0, hit.get("reasoning", "")
                )
                call.saved_usd = float(hit.get("cost_usd", 0.0))
            else:
                call.completion = await self._call(call)
                await self._cache_put(key, call.completion)
        except CallError as exc:
            call.error = exc.kind
            raise
        except BudgetExceeded:
            call.error = "budget"
            raise
        finally:
            latency = time.perf_counter() - start
            self._book(call, latency)
            self._notify(call, latency)
        assert call.completion is not None  # set above, or an exception propagated
        return dataclasses.replace(call.completion, latency_s=latency)

    async def _call(self, call: _Call) -> Completion:
        spec, route = call.client.spec, call.route
        if route.missing_key:
            raise CallError(
                "auth", f"environment variable {route.missing_key} (model {spec.name}) is not set"
            )
        limit = self._semaphore(route)
        prices = (spec.input_cost_per_token, spec.output_cost_per_token)

        async def attempt() -> Any:
            self._check_budget()
            async with limit:
                call.requests += 1
                return await self._sender.send(
                    route.model,
                    call.messages,
                    route.api_base,
                    route.api_key,
                    self.settings.timeout_s,
                    prices,
                    call.params,
                )

        try:
            response: Any = await self._retrying()(attempt)
        except (BudgetExceeded, CallError):
            raise
        except Exception as exc:
            kind = classify(exc).kind
            raise CallError(kind, f"{spec.name} after {call.requests} attempt(s): {exc}") from exc
        return self._completion(spec, response)

    def _retrying(self) -> AsyncRetrying:
        backoff = self.settings.backoff
        exponential = wait_exponential_jitter(initial=backoff.initial, max=backoff.max, jitter=backoff.jitter)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            after = classify(exc).retry_after_s if exc is not None else None
            return min(after, backoff.max_retry_after) if after is not None else exponential(state)

        return AsyncRetrying(
            stop=stop_after_attempt(max(1, self.settings.max_attempts)),
            wait=wait,
            retry=retry_if_exception(lambda exc: classify(exc).retryable),
            reraise=True,
        )

    @staticmethod
    def _completion(spec: ModelSpec, response: Any) -> Completion:
        message = response.choices[0].message if response.choices else None
        text = (getattr(message, "content", None) or "") if message is not None else ""
        reasoning = (getattr(message, "reasoning_content", None) or "") if message is not None else ""
        usage = getattr(response, "usage", None)
        tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = call_cost(spec, tokens_in, tokens_out)
        return Completion(text, tokens_in, tokens_out, cost, False, 0.0, str(reasoning))

    def _semaphore(self, route: Route) -> asyncio.Semaphore:
        # Semaphores bind to one event loop; a job may run several loops in turn.
        per_loop = self._limits.setdefault(asyncio.get_running_loop(), {})
        if route.endpoint not in per_loop:
            per_loop[route.endpoint] = asyncio.Semaphore(route.limit)
        return per_loop[route.endpoint]

    def _check_budget(self) -> None:
        cap = self.settings.max_usd
        if cap is not None and self._spent >= cap:
            raise BudgetExceeded(f"LLM budget spent: {self._spent:.4f} >= max_usd {cap}")

    async def _cache_get(self, key: str) -> dict | None:
        if self.cache.mode == "off":
            return None
        return await asyncio.to_thread(self.cache.get, key)

    async def _cache_put(self, key: str, completion: Completion) -> None:
        if self.cache.mode != "read_write":
            return
        value = {
            "text": completion.text,
            "tokens_in": completion.tokens_in,
            "tokens_out": completion.tokens_out,
            "cost_usd": completion.cost_usd,
            "reasoning": completion.reasoning,
        }
        await asyncio.to_thread(self.cache.put, key, value)

    def _book(self, call: _Call, latency: float) -> None:
        done = call.completion
        fresh = done is not None and not done.cached
        usage = CallUsage(
            cached=done is not None and done.cached,
            failed=call.error is not None,
            requests=call.requests,
            tokens_in=done.tokens_in if done is not None and fresh else 0,
            tokens_out=done.tokens_out if done is not None and fresh else 0,
            cost_usd=done.cost_usd if done is not None and fresh else 0.0,
            latency_s=latency,
            saved_usd=call.saved_usd,
        )
        self._spent += usage.cost_usd
        add_call(self._usage, call.client.role, usage)
        add_to_scopes(call.client.role, usage)

    def _notify(self, call: _Call, latency: float) -> None:
        if not self._listeners:
            return
        done = call.completion or Completion("", 0, 0, 0.0, False, 0.0)
        event = CallEvent(
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
        )
        for listener in self._listeners:
            listener(event)
