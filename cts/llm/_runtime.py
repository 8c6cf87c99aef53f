"""The job's LLM runtime: routing, response cache, retries, limits and accounting."""

from __future__ import annotations

import asyncio
import copy
import os
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from cts.llm._lite import litellm_module
from cts.llm._pricing import call_cost, register_prices
from cts.llm._retry import classify
from cts.llm._settings import LLMSettings
from cts.llm._spec import ModelSpec
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


def route_for(spec: ModelSpec, settings: LLMSettings) -> Route:
    """Apply the global ``api_base``/``model`` overrides to ``spec``."""
    if settings.api_base:
        # One OpenAI-compatible endpoint serves every role: drop the provider prefix.
        served = settings.model or spec.model.split("/", 1)[-1]
        model = f"openai/{served}"
        key = settings.api_key or _DUMMY_KEY
        return Route(model, settings.api_base, key, settings.api_base, settings.concurrency_per_endpoint)
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
        start, started_at = time.perf_counter(), time.time()
        route = route_for(client.spec, self.settings)
        merged = {**client.spec.params, **params}
        key = self.cache.key(
            {"api_base": route.api_base, "model": route.model, "messages": messages,
             "params": merged, "prompt_version": version}
        )
        hit = await self._cache_get(key)
        requests, error, completion = 0, None, None
        try:
            if hit is not None:
                completion = Completion(hit["text"], hit["tokens_in"], hit["tokens_out"], 0.0, True, 0.0)
            else:
                completion, requests = await self._call(client.spec, route, messages, merged)
                await self._cache_put(key, completion)
        except CallError as exc:
            error = exc.kind
            raise
        except BudgetExceeded:
            error = "budget"
            raise
        finally:
            latency = time.perf_counter() - start
            self._book(client, completion, requests, latency, error)
            self._notify(client, route, messages, merged, version, completion, latency, error, started_at)
        return Completion(completion.text, completion.tokens_in, completion.tokens_out,
                          completion.cost_usd, completion.cached, latency)

    async def _call(
        self, spec: ModelSpec, route: Route, messages: list[dict[str, str]], params: Mapping[str, Any]
    ) -> tuple[Completion, int]:
        if route.missing_key:
            raise CallError("auth", f"environment variable {route.missing_key} (model {spec.name}) is not set")
        litellm = litellm_module()
        limit = self._semaphore(route)
        attempts = 0

        async def attempt() -> Any:
            nonlocal attempts
            self._check_budget()
            async with limit:
                attempts += 1
                return await litellm.acompletion(
                    model=route.model, messages=messages, api_base=route.api_base, api_key=route.api_key,
                    timeout=self.settings.timeout_s, num_retries=0, max_retries=0,
                    # per-call prices spare litellm a price-table search (~1 ms CPU per call)
                    input_cost_per_token=spec.input_cost_per_token,
                    output_cost_per_token=spec.output_cost_per_token,
                    **params,
                )

        try:
            response = await self._retrying()(attempt)
        except (BudgetExceeded, CallError):
            raise
        except Exception as exc:
            failure = classify(exc)
            raise CallError(failure.kind, f"{spec.name} after {attempts} attempt(s): {exc}") from exc
        return self._completion(spec, response), attempts

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
        text = (response.choices[0].message.content or "") if response.choices else ""
        usage = getattr(response, "usage", None)
        tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = call_cost(spec, tokens_in, tokens_out)
        return Completion(text, tokens_in, tokens_out, cost, False, 0.0)

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
        value = {"text": completion.text, "tokens_in": completion.tokens_in,
                 "tokens_out": completion.tokens_out, "cost_usd": completion.cost_usd}
        await asyncio.to_thread(self.cache.put, key, value)

    def _book(
        self, client: ChatClient, completion: Completion | None, requests: int, latency: float, error: str | None
    ) -> None:
        fresh = completion is not None and not completion.cached
        call = CallUsage(
            cached=completion is not None and completion.cached,
            failed=error is not None,
            requests=requests,
            tokens_in=completion.tokens_in if fresh else 0,
            tokens_out=completion.tokens_out if fresh else 0,
            cost_usd=completion.cost_usd if fresh else 0.0,
            latency_s=latency,
        )
        self._spent += call.cost_usd
        add_call(self._usage, client.role, call)
        add_to_scopes(client.role, call)

    def _notify(
        self, client: ChatClient, route: Route, messages: list[dict[str, str]], params: Mapping[str, Any],
        version: str, completion: Completion | None, latency: float, error: str | None, started_at: float,
    ) -> None:
        if not self._listeners:
            return
        event = CallEvent(
            client.role, client.spec.name, route.model, route.api_base, tuple(messages), dict(params), version,
            completion.text if completion else "", completion.tokens_in if completion else 0,
            completion.tokens_out if completion else 0, completion.cost_usd if completion else 0.0,
            bool(completion and completion.cached), latency, error, started_at,
        )
        for listener in self._listeners:
            listener(event)
