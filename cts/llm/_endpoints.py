"""Per-event-loop endpoint state of a runtime: adaptive limiters and the in-flight table.

asyncio primitives bind to one event loop, and a job may run several loops in
turn, so each loop gets its own; a sweep hands every job's runtime the same ones
(see :meth:`EndpointState.share`).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from cts.core.contracts import Route
from cts.llm._adaptive import AdaptiveLimiter, LimiterSnapshot
from cts.llm._settings import LLMSettings
from cts.llm._singleflight import SingleFlight


class EndpointState:
    """Limiters per endpoint and identical requests in flight, per event loop."""

    def __init__(self) -> None:
        self._limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AdaptiveLimiter]]
        self._limits = weakref.WeakKeyDictionary()
        self._inflight: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SingleFlight[Any]]
        self._inflight = weakref.WeakKeyDictionary()

    def share(
        self, loop: asyncio.AbstractEventLoop, limits: dict[str, AdaptiveLimiter], inflight: SingleFlight[Any]
    ) -> None:
        """On ``loop``, use these limiters and in-flight table (shared by a sweep's runtimes)."""
        self._limits[loop] = limits
        self._inflight[loop] = inflight

    def flights(self) -> SingleFlight[Any]:
        """The running loop's table of requests in flight."""
        return self._inflight.setdefault(asyncio.get_running_loop(), SingleFlight())

    def limiter(self, route: Route, settings: LLMSettings) -> AdaptiveLimiter:
        """The running loop's limiter of ``route``'s endpoint (made on first use)."""
        per_loop = self._limits.setdefault(asyncio.get_running_loop(), {})
        if route.endpoint not in per_loop:
            per_loop[route.endpoint] = AdaptiveLimiter.from_settings(
                route.limit, settings.adaptive, route.floor, settings.backoff.max_retry_after
            )
        return per_loop[route.endpoint]

    def snapshots(self) -> dict[str, LimiterSnapshot]:
        """Per endpoint: the adaptive limiter's counters (the running loop's, else every loop's)."""
        try:
            per_loop = self._limits.get(asyncio.get_running_loop(), {})
        except RuntimeError:  # no running loop
            per_loop = {k: v for limits in self._limits.values() for k, v in limits.items()}
        return {endpoint: limiter.snapshot() for endpoint, limiter in per_loop.items()}
