"""The job's LLM runtime: routing, response cache, retries, limits and accounting."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from cts.core.contracts import Completion, Route
from cts.core.types import CallError, CircuitOpen, SpendLimitReached
from cts.llm._adaptive import AdaptiveLimiter, LimiterSnapshot
from cts.llm._audit import note_call, note_wire
from cts.llm._batched import Brokers, batched_call
from cts.llm._breaker import CircuitBreaker
from cts.llm._calls import (
    IN_FLIGHT,
    Listener,
    PendingCall,
    cache_value,
    cached_completion,
    call_event,
    call_usage,
    completion_of,
    orphan_usage,
    route_for,
    settled,  # noqa: F401 - re-exported by cts.llm
)
from cts.llm._client import ChatClient
from cts.llm._endpoints import EndpointState
from cts.llm._lite import litellm_module
from cts.llm._pricing import Prices, register_prices, route_prices
from cts.llm._rejections import REJECTED_KINDS, Rejections
from cts.llm._retry import classify, retrying, said
from cts.llm._rules import applied_params
from cts.llm._settings import LLMSettings
from cts.llm._singleflight import SingleFlight
from cts.llm._spec import ModelSpec
from cts.llm._transport import Sender, openai_compatible
from cts.llm._usage import Usage, add_call, add_to_scopes, check_spend_limit
from cts.llm.cache import ResponseCache
from cts.llm.sampling import salted, sampled_params

log = logging.getLogger(__name__)


def llm_cache_location(settings: LLMSettings, cache_dir: Path) -> Path | str:
    """The response cache's URL (``cache.url``), file (``cache.path``) or default file."""
    return settings.cache_url or settings.cache_path or Path(cache_dir) / "llm_cache.sqlite"


class LLMRuntime:
    """Per-job LLM runtime shared by every role (one per ``Services``)."""

    def __init__(self, settings: LLMSettings, cache: ResponseCache) -> None:
        self.settings = settings
        self.cache = cache
        self._usage: Usage = {}
        self._spent = 0.0
        self._prior: dict[str, float] = {}
        self._endpoints = EndpointState()
        self._registered: set[str] = set()
        self._listeners: list[Listener] = []
        self._served: dict[str, str] = {}  # api_base -> what it serves (endpoint_identity)
        self._sender = Sender(settings.transport)
        self.breaker = CircuitBreaker(settings.breaker_failures, settings.breaker_timeouts)
        self._rejections = Rejections()
        self.batches = Brokers(self)  # services.llm.batch.roles: their sends (cts.llm.batch)
        self.cache_dir: Path | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], cache_dir: Path) -> LLMRuntime:
        """Build the runtime from ``cfg.services.llm``.

        Args:
            settings: The ``services.llm`` mapping.
            cache_dir: Default home of ``llm_cache.sqlite`` (when ``cache.path`` is null).
        """
        parsed = LLMSettings.from_mapping(settings)
        runtime = cls(parsed, ResponseCache(llm_cache_location(parsed, cache_dir), parsed.cache_mode))
        runtime.cache_dir = Path(cache_dir)
        return runtime

    def client(self, spec: ModelSpec | Mapping[str, Any], role: str) -> ChatClient:
        """A client that calls ``spec`` and books usage under ``role``."""
        spec = ModelSpec.coerce(spec)
        route = route_for(spec, self.settings)
        if route.model not in self._registered and self._via_litellm(route):
            self._registered.add(route.model)  # importing litellm costs ~2 s: only when it sends
            register_prices(litellm_module(), route_prices(spec, self.settings), route.model)
        return ChatClient(self, spec, role)

    def _via_litellm(self, route: Route) -> bool:
        return not (self.settings.transport == "openai" and openai_compatible(route.model, route.api_base))

    def usage(self) -> Usage:
        """Per-role totals for the whole job (see ``cts.llm._usage.USAGE_KEYS``)."""
        return {role: dict(row) for role, row in self._usage.items()}  # rows of numbers: a deep copy

    @property
    def spent_usd(self) -> float:
        """USD billed so far by this runtime (calls in flight when a caller gave up included)."""
        return self._spent

    def count_prior_spend(self, usd: float, job_dir: str = "") -> None:
        """Count ``usd`` already spent by earlier runs into ``job_dir`` against ``services.llm.spend.max_usd``.

        A sweep's jobs share one runtime: each job dir's prior spend adds up (a job dir
        counted again replaces its own figure), and the cap applies to the sum.
        """
        self._prior[job_dir] = float(usd)

    @property
    def prior_usd(self) -> float:
        """USD spent by earlier runs into the job dirs this runtime serves."""
        return sum(self._prior.values())

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` after every call (used for optional tracing); once per listener.

        Jobs that share a runtime each register their listener: the same one registered
        twice would see every call twice.
        """
        if listener not in self._listeners:
            self._listeners.append(listener)

    @contextlib.contextmanager
    def endpoint_identity(self, api_base: str, identity: str) -> Iterator[None]:
        """Within the block, the cache keys calls to ``api_base`` by ``identity``, not by the URL.

        A local LLM server cts starts for a job listens on a free loopback port: its URL changes
        from run to run while what it serves does not (:meth:`cts.llm.LocalLLMServer.identity`).
        """
        self._served[api_base] = identity
        try:
            yield
        finally:
            self._served.pop(api_base, None)

    async def _complete(
        self,
        client: ChatClient,
        messages: list[dict[str, str]],
        version: str,
        params: Mapping[str, Any],
        max_output_tokens: int | None = None,
    ) -> Completion:
        start = time.perf_counter()
        spec = client.spec
        requested = sampled_params({**spec.params, **params})
        applied = applied_params(spec.request, requested, max_output_tokens, messages)
        call = PendingCall(client, route_for(spec, self.settings), messages, applied.params, version, time.time())
        note_call(client.role, call.route.model, call.route.api_base, requested, call.params, applied.changes)
        key = self.cache.key(
            salted(  # the repeat index, past repeat 0 (cts.llm.sampling)
                {
                    "api_base": self._served.get(call.route.api_base or "", call.route.api_base),
                    "model": call.route.model,
                    "messages": messages,
                    "params": call.params,
                    "prompt_version": version,
                }
            )
        )
        call.cache_key = key
        try:
            hit, claim = await self._look(key)
            if hit is not None:
                call.completion = cached_completion(hit)
                call.saved_usd = float(hit.get("cost_usd", 0.0))
            else:
                await self._within_spend_limit(key, claim)  # before joins: a spent cap stops the job at once
                call.completion = await self._fresh(call, key, claim)
        except CallError as exc:
            call.error = exc.kind
            raise
        except SpendLimitReached as exc:
            call.error = exc.kind
            raise
        except CircuitOpen as exc:
            call.error = exc.kind
            raise
        finally:
            latency = time.perf_counter() - start
            self._book(call, latency)
            self._notify(call, latency)
        assert call.completion is not None  # set above, or an exception propagated
        return dataclasses.replace(call.completion, latency_s=latency)

    async def _look(self, key: str) -> tuple[dict | None, str | None]:
        """The cached value, or None and the claim taken on the miss in the same trip
        (its owner, ``""`` if another owner holds the key, None when the cache is off)."""
        if self.cache.mode == "off":
            return None, None
        return await self.cache.look(key, self._storage)

    async def _within_spend_limit(self, key: str, claim: str | None) -> None:
        """Check the spend limit on a miss; a spent cap drops the claim just taken."""
        try:
            self._check_spend_limit()
        except SpendLimitReached:
            if claim:
                await self.cache.release_claim(key, claim)
            raise

    async def _fresh(self, call: PendingCall, key: str, claim: str | None) -> Completion:
        """Send the request, or join an identical one in flight (when a cache would serve it anyway).

        ``claim``: the owner of the cache claim taken on the look's miss (see :meth:`_look`).
        """
        if self.cache.mode == "off":
            return await self._send_and_store(call, key, None)
        flights = self._endpoints.flights()
        if claim and key in flights:  # an identical call here waits for another process's row: join it
            await self.cache.release_claim(key, claim)
            claim = ""
        done, leader = await flights.run(key, lambda: self._send_and_store(call, key, claim))
        if leader:
            return done
        call.saved_usd = done.cost_usd  # booked like a cache hit: billed once, to the sender
        return dataclasses.replace(done, cost_usd=0.0, cached=True)

    async def _send_and_store(self, call: PendingCall, key: str, claim: str | None) -> Completion:
        # Across processes (a sweep's jobs on several nodes), the cache key is claimed first:
        # one sends, the others wait for its row (cts.llm.cache.ResponseCache.get_or_compute).
        value, cached = await self.cache.get_or_compute(
            key,
            lambda: self._send_value(call),
            run=self._storage,
            on_miss=self._check_spend_limit,
            claim=claim,
        )
        if not cached:
            assert call.completion is not None  # set by _send_value
            return call.completion
        call.saved_usd = float(value.get("cost_usd", 0.0))
        return cached_completion(value)

    def share_endpoints(
        self, loop: asyncio.AbstractEventLoop, limits: dict[str, AdaptiveLimiter], inflight: SingleFlight[Completion]
    ) -> None:
        """On ``loop``, use these endpoint limiters and in-flight table (shared by a sweep's runtimes)."""
        self._endpoints.share(loop, limits, inflight)

    def limiter_snapshots(self) -> dict[str, LimiterSnapshot]:
        """Per endpoint: the adaptive limiter's counters (on the running loop)."""
        return self._endpoints.snapshots()

    async def _call(self, call: PendingCall) -> Completion:
        spec, route = call.client.spec, call.route
        self.breaker.check(route.endpoint)
        self._rejections.check(route, spec, call.client.role)
        if route.missing_key:
            message = f"environment variable {route.missing_key} (model {spec.name}) is not set"
            self.breaker.failure(route.endpoint, "auth", message)
            raise CallError("auth", message, route.endpoint)
        if self.settings.batch.takes(call.client.role):
            return await batched_call(self, call)
        try:
            # an open breaker ends the call before its wait, not after it
            retry = retrying(self.settings, before_wait=lambda: self.breaker.check(route.endpoint))
            response: Any = await retry(self._attempt, call)
        except (SpendLimitReached, CallError, CircuitOpen):
            raise
        except Exception as exc:
            kind = classify(exc).kind
            if kind in REJECTED_KINDS:
                raise self._rejections.reject(route, spec, call.client.role, exc) from exc
            timeout = self.settings.timeout_for(call.client.role)
            message = f"{spec.name} at {route.endpoint} after {call.requests} attempt(s): {said(exc, timeout)}"
            raise CallError(kind, message, route.endpoint) from exc
        return completion_of(route_prices(spec, self.settings), response)

    async def _attempt(self, call: PendingCall) -> Any:
        """One request, counted by the endpoint's circuit breaker."""
        spec, route = call.client.spec, call.route
        prices = route_prices(spec, self.settings)
        self._check_spend_limit()
        self.breaker.check(route.endpoint)
        timeout = self.settings.timeout_for(call.client.role)
        async with self._endpoints.limiter(route, self.settings).slot(retry=call.requests > 0):
            self.breaker.check(route.endpoint)  # it may have opened while this call waited
            call.requests += 1
            bodies: list[dict[str, Any]] = []  # the body as the provider got it (the request audit)
            try:
                send = self._sender.send(route, call.messages, timeout, prices, call.params, bodies.append)
                response = await self._paid(call, prices, send)
            except Exception as exc:
                self.breaker.failure(route.endpoint, classify(exc).kind, f"{type(exc).__name__}: {said(exc, timeout)}")
                raise
            finally:
                if bodies:
                    note_wire(call.client.role, bodies[0])
        self.breaker.success(route.endpoint)
        return response

    async def _paid(self, call: PendingCall, prices: Prices, send: Awaitable[Any]) -> Any:
        """Await one request; a cancelled caller does not cancel it.

        A request on the wire is billed whether or not anyone waits for the reply
        (e.g. the spend-limit stop cancels the other instances): it runs on, and its
        tokens and cost are booked when it lands (see :func:`settled`), and its
        reply is cached, so a resume does not pay for it again.
        """
        task = asyncio.ensure_future(send)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            # Only orphans are settled: a sweep's jobs share the loop, and a job that ends
            # normally must not wait for the other jobs' requests.
            pending = IN_FLIGHT.setdefault(asyncio.get_running_loop(), set())
            pending.add(task)
            task.add_done_callback(pending.discard)
            task.add_done_callback(lambda done: self._book_orphan(call, prices, done))
            raise

    def _book_orphan(self, call: PendingCall, prices: Prices, done: asyncio.Future[Any]) -> None:
        if done.cancelled() or done.exception() is not None:
            return  # no reply, nothing billed that we could know of
        reply = completion_of(prices, done.result())
        usage = orphan_usage(reply)
        self._spent += usage.cost_usd
        add_call(self._usage, call.client.role, usage)
        add_to_scopes(call.client.role, usage)
        if self.cache.mode == "read_write" and call.cache_key:
            try:  # once per straggler, at a stop: a blocking write is fine here
                self.cache.put(call.cache_key, cache_value(reply))
            except Exception as exc:  # noqa: BLE001 - a lost cache entry costs a request, not the job
                log.warning("could not cache a late reply: %s", exc)

    def _check_spend_limit(self) -> None:
        check_spend_limit(self.settings.max_usd, self.prior_usd, self._spent)

    async def _storage(self, op: Callable[..., Any], *args: Any) -> Any:
        """Run a cache operation off the loop (the cache's :attr:`~cts.llm.cache.ResponseCache.offload`);
        its failure is the infrastructure's (kind ``storage``)."""
        where = f"cache {self.cache.location}"
        self.breaker.check(where)
        try:
            result = await self.cache.offload(op, *args)
        except Exception as exc:  # any store error: corrupt file, full disk, lost server
            message = f"response cache {self.cache.location}: {type(exc).__name__}: {exc}"
            self.breaker.failure(where, "storage", message)
            raise CallError("storage", message, where) from exc
        self.breaker.success(where)
        return result

    async def _send_value(self, call: PendingCall) -> dict:
        """Send ``call`` (a cache miss); the completion is kept on ``call``, its cache value returned."""
        call.completion = await self._call(call)
        return cache_value(call.completion)

    def _book(self, call: PendingCall, latency: float) -> None:
        usage = call_usage(call, latency)
        self._spent += usage.cost_usd
        add_call(self._usage, call.client.role, usage)
        add_to_scopes(call.client.role, usage)

    def _notify(self, call: PendingCall, latency: float) -> None:
        if not self._listeners:
            return
        event = call_event(call, latency)
        for listener in self._listeners:
            listener(event)
