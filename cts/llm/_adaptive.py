"""Adaptive concurrency per endpoint: grow while calls succeed, back off on congestion.

One limiter per endpoint (api_base or provider) admits calls up to its current
limit, between a floor and a ceiling (``services.llm.adaptive`` and
``concurrency_per_endpoint`` / the model's ``max_concurrency``). It starts at
``initial`` and doubles per round trip (slow start) until the first congestion
signal, then adds about one slot per round trip (additive increase). A 429, a
timeout or a 5xx caps the limit at ``decrease`` times the calls still in flight
(multiplicative decrease). Repeated signals at the same level do not compound;
as the calls admitted above the endpoint's capacity come back rejected, the
calls in flight fall to what it takes and the limit follows, so a slow-start
overshoot settles within one round trip instead of churning 429s. A
Retry-After pauses new admissions to the endpoint for that long. A 429 that
carries one is a rate limit the server has told us how to respect, not a sign
of too many calls at once: it pauses and leaves the limit alone. Cutting on it
would let a provider that refuses a share of requests at any concurrency (a
per-minute quota) drive the limit to the floor, one 429 after another, and run
the endpoint serially; the pause alone keeps the rate at what the quota allows.
Near the level where the last congestion happened the limit creeps up eight
times slower, so it probes the endpoint's capacity rarely (few 429s) while
staying close to it.

Waiting calls are admitted oldest instance first (:func:`priority_scope`): a
sweep finishes the instances it started before it starts more of them, which
keeps its tail short. A call retried after a failure waits without its slot,
so its wait holds nobody up, then queues again with its instance's priority. A
pause holds new calls only: a retry has waited its own Retry-After (plus
jitter) already, so it goes in when it is due instead of joining the burst of
new calls at the end of every later pause, always at the same place in the
server's order (a server that refuses every Nth request would refuse it each time).

:func:`calls_in_flight` tells how many requests are on the wire and how long the
oldest has been waiting for its answer (the progress bar shows it).

The same setting serves a vLLM server that takes 64 calls (the limit climbs to
the ceiling and stays) and a hosted API that rate-limits at 10 (it settles just
under 10).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from cts.compose.schema import Adaptive
from cts.core.contracts import InFlight
from cts.llm._retry import classify

CONGESTION_KINDS = frozenset({"rate_limit", "timeout", "server_error"})
_PLATEAU_SLOWDOWN = 8.0
_PRIORITY: contextvars.ContextVar[float] = contextvars.ContextVar("cts_llm_priority", default=float("inf"))
_ORDER = itertools.count()
_LIVE: weakref.WeakSet[AdaptiveLimiter] = weakref.WeakSet()


@contextlib.contextmanager
def priority_scope() -> Iterator[None]:
    """Calls made inside (tasks created inside too) wait behind those of earlier scopes only.

    One scope per instance: the endpoint's queue serves the oldest instance first.
    """
    token = _PRIORITY.set(float(next(_ORDER)))
    try:
        yield
    finally:
        _PRIORITY.reset(token)


@dataclass(frozen=True)
class LimiterSnapshot:
    """Counters of one endpoint's limiter at one moment."""

    limit: float
    in_flight: int
    peak_in_flight: int
    admitted: int
    congestion: int
    cuts: int
    oldest_s: float = 0.0
    """Age of the oldest request in flight (0 when none)."""


def calls_in_flight() -> InFlight:
    """Requests in flight on the running loop's limiters, and the age of the oldest."""
    from cts.llm.batch._broker import batch_counts

    loop = asyncio.get_running_loop()
    starts = [t for limiter in list(_LIVE) if limiter.loop is loop for t in limiter.started()]
    batches = batch_counts(loop)
    return InFlight(
        len(starts),
        time.monotonic() - min(starts) if starts else 0.0,
        batches.submitted,
        batches.running,
        batches.done,
        batches.oldest_s,
    )


def limiter_snapshots() -> list[LimiterSnapshot]:
    """The running loop's limiters (one per endpoint), as snapshots: what the planner's clock samples."""
    loop = asyncio.get_running_loop()
    return [limiter.snapshot() for limiter in list(_LIVE) if limiter.loop is loop]


class AdaptiveLimiter:
    """AIMD admission control for one endpoint (one event loop).

    Args:
        ceiling: Maximum calls in flight.
        floor: Minimum limit.
        initial: Starting limit.
        decrease: Multiplicative decrease factor (0 < decrease < 1).
        adaptive: False pins the limit at ``ceiling``.
        max_pause_s: Cap on a Retry-After pause.
    """

    def __init__(
        self,
        ceiling: int,
        floor: int = 1,
        initial: int | None = None,
        decrease: float = 0.9,
        adaptive: bool = True,
        max_pause_s: float = 60.0,
    ) -> None:
        self.ceiling = max(1, ceiling)
        self.floor = max(1, min(floor, self.ceiling))
        start = self.ceiling if not adaptive or initial is None else initial
        self.limit = float(min(self.ceiling, max(self.floor, start)))
        self.decrease = decrease
        self.adaptive = adaptive
        self.max_pause_s = max_pause_s
        self.in_flight = 0
        self._peak = self._admitted = self._congestion = self._cuts = 0
        self._epoch = 0
        self._slow_start = True
        self._paused_until = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._congested_at = float("inf")
        self._waiters: list[
            tuple[float, int, asyncio.Future[tuple[int, int]]]
        ] = []  # heap: (priority, arrival, future)
        self._retries: list[tuple[float, int, asyncio.Future[tuple[int, int]]]] = []  # the same, retried calls
        self._since: dict[int, float] = {}  # slot -> monotonic time it was taken
        self.loop: asyncio.AbstractEventLoop | None = None
        _LIVE.add(self)

    @classmethod
    def from_settings(
        cls, ceiling: int, settings: Adaptive, floor: int | None = None, max_pause_s: float = 60.0
    ) -> AdaptiveLimiter:
        """A limiter with ``ceiling`` and the ``services.llm.adaptive`` settings (``floor`` overrides).

        ``max_pause_s`` bounds a Retry-After pause (``services.llm.backoff.max_retry_after``).
        """
        return cls(ceiling, floor or settings.floor, settings.initial, settings.decrease, settings.enabled, max_pause_s)

    @property
    def capacity(self) -> int:
        """Calls admitted at once right now."""
        return max(self.floor, min(self.ceiling, int(self.limit)))

    def snapshot(self) -> LimiterSnapshot:
        """Current counters."""
        starts = self.started()
        oldest = time.monotonic() - min(starts) if starts else 0.0
        return LimiterSnapshot(
            self.limit, self.in_flight, self._peak, self._admitted, self._congestion, self._cuts, oldest
        )

    def started(self) -> list[float]:
        """Monotonic start times of the requests holding a slot."""
        return list(self._since.values())

    @contextlib.asynccontextmanager
    async def slot(self, retry: bool = False) -> AsyncIterator[None]:
        """Hold one slot for one request; its outcome moves the limit.

        Args:
            retry: The call already failed once and waited its backoff or Retry-After: it is
                not a new call, so an endpoint's pause does not hold it (the limit still does).
        """
        self.loop = asyncio.get_running_loop()
        epoch, _ = await self._acquire(retry)
        token = next(_ORDER)
        self._since[token] = time.monotonic()
        try:
            yield
        except asyncio.CancelledError:
            self._release(token)
            raise
        except BaseException as exc:
            self._release(token)
            self._failed(exc, epoch)
            raise
        else:
            self._release(token)
            self._succeeded()

    async def _acquire(self, retry: bool) -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        free = self.in_flight < self.capacity and not self._retries
        if free and (retry or (not self._waiters and not self._paused(loop))):
            return self._take()
        fut: asyncio.Future[tuple[int, int]] = loop.create_future()
        heapq.heappush(self._retries if retry else self._waiters, (_PRIORITY.get(), next(_ORDER), fut))
        self._wake()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release()  # a slot was handed over just as we were cancelled
            raise  # a cancelled future left in the heap is skipped by _wake

    def _take(self) -> tuple[int, int]:
        self.in_flight += 1
        self._admitted += 1
        self._peak = max(self._peak, self.in_flight)
        return self._epoch, self.in_flight

    def _paused(self, loop: asyncio.AbstractEventLoop) -> bool:
        return loop.time() < self._paused_until

    def _wake(self) -> None:
        loop = asyncio.get_running_loop()
        paused = self._paused(loop)
        if paused and self._timer is None:
            self._timer = loop.call_at(self._paused_until, self._resume)
        while self.in_flight < self.capacity:
            queue = self._next_queue(paused)
            if queue is None:
                return
            fut = heapq.heappop(queue)[2]
            if not fut.done():
                fut.set_result(self._take())

    def _next_queue(self, paused: bool) -> list[tuple[float, int, asyncio.Future[tuple[int, int]]]] | None:
        """The queue whose head goes next: retries pass a pause; otherwise the oldest instance first."""
        if paused or not self._waiters:
            return self._retries or None
        if not self._retries:
            return self._waiters
        return min(self._retries, self._waiters, key=lambda queue: queue[0])

    def _resume(self) -> None:
        self._timer = None
        self._wake()

    def _release(self, token: int | None = None) -> None:
        self.in_flight -= 1
        if token is not None:
            self._since.pop(token, None)
        self._wake()

    def _succeeded(self) -> None:
        if self.adaptive:
            step = 1.0 if self._slow_start else 1.0 / max(1.0, self.limit)
            if self.limit + 1 >= self._congested_at:
                step /= _PLATEAU_SLOWDOWN  # near the last congestion: probe rarely
            self.limit = min(float(self.ceiling), self.limit + step)
        self._wake()

    def _failed(self, exc: BaseException, epoch: int) -> None:
        failure = classify(exc)
        if failure.kind not in CONGESTION_KINDS:
            return
        self._congestion += 1
        if failure.retry_after_s:
            loop = asyncio.get_running_loop()
            self._paused_until = max(self._paused_until, loop.time() + min(failure.retry_after_s, self.max_pause_s))
        if not self.adaptive:
            return
        if failure.kind == "rate_limit" and failure.retry_after_s is not None:
            return  # a rate, not a concurrency, was exceeded, and the server said when to come back
        level = self.in_flight + 1.0  # what the endpoint took, at most
        if epoch == self._epoch:  # the first signal of this congestion event
            self._epoch += 1
            self._cuts += 1
            level = min(self.limit, level)
            self._congested_at = level
        else:  # later signals of the same event: calls admitted above capacity coming back
            self._congested_at = min(self._congested_at, level)
        self._slow_start = False
        self.limit = max(float(self.floor), min(self.limit, level * self.decrease))
