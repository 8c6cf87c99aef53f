"""A runtime's batched calls: the roles in ``services.llm.batch.roles`` go through the broker.

A batched call keeps everything around the send the live one has (the cache key and
lookup, the cross-process claim, the spend check, accounting, listeners); only the send
differs: the request joins a batch (:mod:`cts.llm.batch`), it is priced at the model's
batch price, and it counts no live request (``requests`` 0: no HTTP request of its own).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Protocol

from cts._util.secrets import redact
from cts.core.contracts import Completion
from cts.core.types import CallError
from cts.llm._calls import cache_value, completion_of
from cts.llm._pricing import Prices, route_prices
from cts.llm._rejections import REJECTED_KINDS, Rejections
from cts.llm._retry import classify
from cts.llm._settings import LLMSettings
from cts.llm._spec import ModelSpec
from cts.llm.batch._broker import BatchBroker
from cts.llm.batch._ledger import Route as BatchRoute
from cts.llm.cache import ResponseCache


class LLMRuntime(Protocol):
    """What a batched call needs of :class:`cts.llm.LLMRuntime` (a Protocol: the runtime imports this module)."""

    settings: LLMSettings
    cache: ResponseCache
    cache_dir: Path | None
    batches: Brokers
    _rejections: Rejections

    async def _paid(self, call: Any, prices: Prices, send: Awaitable[Any]) -> Any: ...


def batch_prices(spec: ModelSpec, settings: LLMSettings) -> Prices:
    """USD per token of a batched request: the model's batch price (``api_base``, no batch terms: the live price)."""
    if settings.api_base or spec.batch is None:
        return route_prices(spec, settings)
    return spec.batch.input_cost_per_token, spec.batch.output_cost_per_token


def batch_api(spec: ModelSpec, settings: LLMSettings) -> str | None:
    """The Batch API a spec's calls would use, or None (``api_base`` servers speak OpenAI's)."""
    if settings.api_base:
        return "openai"
    return spec.batch.api if spec.batch is not None else None


def ledger_dir(runtime: LLMRuntime) -> Path:
    """``services.llm.batch.dir``, else the launch's dir (the sweep's), else the cache's dir."""
    from cts._util.launch import current_launch

    if runtime.settings.batch.dir:
        return Path(runtime.settings.batch.dir)
    launch = current_launch()
    if launch is not None:
        return Path(launch.sweep_dir)
    if runtime.cache_dir is not None:
        return runtime.cache_dir
    raise CallError("config", "batch mode needs a ledger dir: set services.llm.batch.dir")


class Brokers:
    """A runtime's batch broker per event loop (asyncio objects bind to one loop)."""

    def __init__(self, runtime: LLMRuntime) -> None:
        self._runtime = weakref.ref(runtime)
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, BatchBroker]
        self._per_loop = weakref.WeakKeyDictionary()

    def get(self) -> BatchBroker:
        """The running loop's broker (made on first use)."""
        loop = asyncio.get_running_loop()
        if loop not in self._per_loop:
            runtime = self._runtime()
            assert runtime is not None
            self._per_loop[loop] = BatchBroker(
                runtime.settings.batch, lambda: ledger_dir(runtime), lambda k, r, resp: _store(runtime, k, r, resp)
            )
        return self._per_loop[loop]

    def all(self) -> list[BatchBroker]:
        """Every loop's broker (none until a batched call ran)."""
        return list(self._per_loop.values())


async def _store(runtime: LLMRuntime, key: str, route: BatchRoute, response: Any) -> None:
    """Keep a reply of an earlier run's batch in the response cache (nobody in this process asked for it)."""
    if runtime.cache.mode != "read_write":
        return
    value = cache_value(completion_of((route.price_in, route.price_out), response))
    await runtime.cache.offload(runtime.cache.put, key, value)


async def batched_call(runtime: LLMRuntime, call: Any) -> Completion:
    """Send ``call`` (the runtime's ``PendingCall``) through its model's Batch API and wait for its reply.

    Raises:
        CallError: kind ``batch`` after ``max_submissions`` failed sendings; ``connection`` when the
            Batch API could not be reached (both infrastructure failures: nothing is cached); ``RequestRejected`` when the provider refused the request.
    """
    spec, route = call.client.spec, call.route
    api = batch_api(spec, runtime.settings)
    if api is None:  # refused at start (cts.compose.model_checks); a runtime used on its own says it here
        raise CallError("config", f"model {spec.name} has no Batch API (role {call.client.role} is batched)")
    prices = batch_prices(spec, runtime.settings)
    where = BatchRoute(api, route.api_base, route.model, (), prices[0], prices[1])
    send = runtime.batches.get().send(where, route.api_key, call.cache_key, call.messages, call.params)
    try:
        response = await runtime._paid(call, prices, send)
    except CallError:
        raise
    except Exception as exc:
        kind = classify(exc).kind
        if kind in REJECTED_KINDS:
            raise runtime._rejections.reject(route, spec, call.client.role, exc) from exc
        raise CallError(
            kind, f"{spec.name} in a batch at {route.endpoint}: {redact(str(exc))}", route.endpoint
        ) from exc
    return completion_of(prices, response)
