"""The batch broker: one schedule of batches for every job on an event loop.

A batched call hands the broker its request and waits on a future. Requests queue per
route (Batch API, endpoint, model, header set); a queue is sent as one batch once it holds
``max_requests`` or its oldest request has waited ``max_wait_s``. Each batch is recorded in
the ledger before it is submitted, then polled every ``poll_s`` until it ends; its replies
resolve their futures. A request whose line expired, was cancelled or failed with a 408, 429
or 5xx is queued again, up to ``max_submissions`` sendings; then its caller gets a
``CallError`` of kind ``batch``: an infrastructure failure (:data:`cts.core.types.INFRA_CALL_KINDS`),
never stored as a reply; the instance is not recorded and a rerun sends the request again.

A resumed process reads the ledger once: a request whose key an open batch holds waits for
that batch (it is polled, never sent again), and replies that nobody in this process waits
for are stored in the response cache, so what was paid is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cts._util.secrets import redact
from cts.core.types import CallError
from cts.llm.batch._ledger import Entry, Ledger, Route
from cts.llm.batch._settings import BatchSettings
from cts.llm.batch._wire import WIRES, Outcome, Status, Wire

log = logging.getLogger(__name__)
Store = Callable[[str, Route, Any], Awaitable[None]]
"""Stores a reply nobody in this process waits for: (cache key, route, response)."""
_LIVE: weakref.WeakSet[BatchBroker] = weakref.WeakSet()
_TRANSIENT_WAIT_S = 0.5  # first pause after a failed Batch API step, doubling ...
_TRANSIENT_MAX_WAIT_S = 30.0  # ... up to this; then, past services.llm.batch.transient_budget_s, the step fails


@dataclass
class _Waiting:
    key: str
    body: dict[str, Any] | None
    """None while no caller of this process asked for it (a key of an adopted batch)."""
    future: asyncio.Future[Any]
    sendings: int = 0
    last_error: str = ""


@dataclass(frozen=True)
class BatchCounts:
    """What a progress display shows of the batches: sent, running, ended, and the oldest running one's age."""

    submitted: int = 0
    running: int = 0
    done: int = 0
    oldest_s: float = 0.0
    queued: int = 0

    def postfix(self) -> dict[str, str]:
        """tqdm postfix fields (empty when batch mode sent nothing)."""
        if not (self.submitted or self.queued):
            return {}
        return {"batches": f"{self.running} running/{self.done} done", "batch_age": f"{self.oldest_s:.0f}s"}


class BatchBroker:
    """Gathers batched requests on one event loop, submits, polls and answers them.

    Args:
        settings: ``services.llm.batch``.
        ledger_dir: Where the ledger lives (called once, on the first request).
        store: Keeps replies that no caller in this process waits for (the response cache).
        wires: The Batch API of each ``batch.api`` value.
    """

    def __init__(
        self,
        settings: BatchSettings,
        ledger_dir: Callable[[], Path],
        store: Store,
        wires: Mapping[str, Wire] = WIRES,
    ) -> None:
        self.settings = settings
        self._ledger_dir = ledger_dir
        self._ledger: Ledger | None = None
        self._store = store
        self._wires = wires
        self._queues: dict[Route, list[_Waiting]] = {}
        self._timers: dict[Route, asyncio.TimerHandle] = {}
        self._waiting: dict[str, _Waiting] = {}
        self._keys: dict[Route, str | None] = {}
        self._open: dict[str, Entry] = {}  # ledger batches of earlier processes not polled yet
        self._open_keys: dict[str, str] = {}  # their request keys -> local id
        self._running: dict[str, float] = {}  # local id -> monotonic start
        self._tasks: set[asyncio.Task[None]] = set()
        self.submitted = 0
        self.done = 0
        self.sizes: list[int] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        _LIVE.add(self)

    @property
    def ledger(self) -> Ledger:
        """The ledger (read on first use: batches an earlier process left open are adopted)."""
        if self._ledger is None:
            self._ledger = Ledger(self._ledger_dir())
            self._open = {e.local_id: e for e in self._ledger.open_batches()}
            self._open_keys = {key: e.local_id for e in self._open.values() for key in e.keys}
        return self._ledger

    def counts(self) -> BatchCounts:
        """Batches sent, running and ended so far, and the oldest running one's age."""
        now = time.monotonic()
        oldest = now - min(self._running.values()) if self._running else 0.0
        queued = sum(len(q) for q in self._queues.values())
        return BatchCounts(self.submitted, len(self._running), self.done, oldest, queued)

    async def send(
        self, route: Route, api_key: str | None, key: str, messages: list[dict[str, Any]], params: Mapping[str, Any]
    ) -> Any:
        """The reply to one request, sent in a batch (or taken from a batch already sent).

        Raises:
            CallError: kind ``batch`` when the request's lines failed ``max_submissions`` times.
            HTTPStatusError: the provider refused the request itself (a 4xx line).
        """
        self.loop = asyncio.get_running_loop()
        wire = self._wires[route.api]
        body, route = wire.body(route, messages, params)
        self._keys.setdefault(route, api_key)
        self._adopt(route, key)
        waiting = self._waiting.get(key)
        if waiting is None:
            waiting = _Waiting(key, body, asyncio.get_running_loop().create_future())
            self._waiting[key] = waiting
            self._enqueue(route, waiting)
        elif waiting.body is None:
            waiting.body = body  # a key of an adopted batch: its reply comes from that batch
        try:
            return await asyncio.shield(waiting.future)
        finally:
            if waiting.future.done():
                self._waiting.pop(key, None)

    def _adopt(self, route: Route, key: str) -> None:
        """When an open batch of an earlier process holds ``key``, poll it; its keys then wait for it."""
        _ = self.ledger
        local_id = self._open_keys.get(key)
        entry = self._open.get(local_id) if local_id is not None else None
        if entry is None or entry.route.api != route.api or entry.route.api_base != route.api_base:
            return
        del self._open[entry.local_id]
        loop = asyncio.get_running_loop()
        for held in entry.keys:
            if held not in self._waiting:
                self._waiting[held] = _Waiting(held, None, loop.create_future(), sendings=1)
        self._keys.setdefault(entry.route, self._keys.get(route))
        self._spawn(self._watch(entry.route, entry.local_id, entry.batch_id, entry.keys, adopted=True))

    def _enqueue(self, route: Route, waiting: _Waiting) -> None:
        queue = self._queues.setdefault(route, [])
        queue.append(waiting)
        if len(queue) >= self.settings.max_requests:
            self._flush(route)
        elif route not in self._timers:
            loop = asyncio.get_running_loop()
            self._timers[route] = loop.call_later(self.settings.max_wait_s, self._flush, route)

    def _flush(self, route: Route) -> None:
        timer = self._timers.pop(route, None)
        if timer is not None:
            timer.cancel()
        queue = self._queues.pop(route, [])
        while queue:
            part, queue = queue[: self.settings.max_requests], queue[self.settings.max_requests :]
            self._spawn(self._submit(route, part))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _submit(self, route: Route, part: list[_Waiting]) -> None:
        local_id = uuid.uuid4().hex
        keys = tuple(w.key for w in part)
        try:
            self.ledger.intend(local_id, route, keys)  # on disk before the request leaves
            for w in part:
                w.sendings += 1
            wire, api_key = self._wires[route.api], self._keys.get(route)
            lines = [(w.key, w.body or {}) for w in part]
            tried: list[bool] = []

            async def submit_once() -> str:
                # a create whose answer was lost may have made the batch: look for it before sending again
                found = await wire.find(route, api_key, local_id) if tried else None
                tried.append(True)
                return found or await wire.submit(route, api_key, local_id, lines, self.settings.window)

            batch_id = await self._transient(submit_once)
            self.ledger.submitted(local_id, batch_id)
        except Exception as exc:  # noqa: BLE001 - the callers get the failure, the sweep goes on
            self._fail(part, _infra(route, f"could not submit a batch of {len(part)}: {exc}"))
            return
        self.submitted += 1
        self.sizes.append(len(part))
        log.info("batch %s: %d requests to %s (%s)", batch_id, len(part), route.model, route.api)
        await self._watch(route, local_id, batch_id, keys)

    async def _watch(
        self, route: Route, local_id: str, batch_id: str | None, keys: tuple[str, ...], adopted: bool = False
    ) -> None:
        """Poll a batch until it ends, then answer (or re-queue) its requests."""
        wire, api_key = self._wires[route.api], self._keys.get(route)
        self._running[local_id] = time.monotonic()
        try:
            if batch_id is None:  # intended by a process that died: did its submission reach the provider?
                batch_id = await self._transient(lambda: wire.find(route, api_key, local_id))
                if batch_id is None:
                    self.ledger.end(local_id, "never_submitted", {})
                    self._requeue_keys(route, keys, "never submitted")
                    return
                self.ledger.submitted(local_id, batch_id)
            status = await self._until_ended(wire, route, api_key, batch_id)
            outcomes = await self._transient(lambda: wire.results(route, api_key, status))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            self._fail(
                [self._waiting[k] for k in keys if k in self._waiting], _infra(route, f"batch {batch_id}: {exc}")
            )
            return
        finally:
            self._running.pop(local_id, None)
        await self._answer(route, keys, outcomes, status)
        self.ledger.end(local_id, status.status, status.counts)
        self.done += 1
        if adopted:
            log.info("batch %s of an earlier run ended: %s", batch_id, status.status)

    async def _until_ended(self, wire: Wire, route: Route, api_key: str | None, batch_id: str) -> Status:
        while True:
            status = await self._transient(lambda: wire.status(route, api_key, batch_id))
            if status.ended:
                return status
            await asyncio.sleep(self.settings.poll_s)

    async def _answer(
        self, route: Route, keys: tuple[str, ...], outcomes: Mapping[str, Outcome], status: Status
    ) -> None:
        for key in keys:
            outcome = outcomes.get(key) or Outcome(retry=True, error=RuntimeError(f"no result (batch {status.status})"))
            waiting = self._waiting.get(key)
            if waiting is not None and waiting.body is None:  # nobody here asked for it (yet)
                del self._waiting[key]
                waiting = None
            if outcome.response is not None:
                if waiting is not None and not waiting.future.done():
                    waiting.future.set_result(outcome.response)
                else:  # an earlier process's request nobody here waits for: keep what was paid
                    await self._store(key, route, outcome.response)
            elif waiting is not None and not waiting.future.done():
                self._retry_or_fail(route, waiting, outcome)

    def _retry_or_fail(self, route: Route, waiting: _Waiting, outcome: Outcome) -> None:
        waiting.last_error = str(outcome.error)
        if outcome.retry and waiting.sendings < self.settings.max_submissions:
            self._enqueue(route, waiting)
            return
        if not outcome.retry and outcome.error is not None:
            waiting.future.set_exception(outcome.error)
            return
        message = f"{route.model}: no reply after {waiting.sendings} batch submission(s), last: {waiting.last_error}"
        waiting.future.set_exception(CallError("batch", redact(message), route.api_base or route.api))

    def _requeue_keys(self, route: Route, keys: tuple[str, ...], why: str) -> None:
        for key in keys:
            waiting = self._waiting.get(key)
            if waiting is not None and waiting.body is None:
                del self._waiting[key]  # nobody asked: a later caller sends it afresh
            elif waiting is not None and not waiting.future.done():
                waiting.last_error = why
                self._enqueue(route, waiting)

    def _fail(self, part: list[_Waiting], error: Exception) -> None:
        for w in part:
            if not w.future.done():
                w.future.set_exception(error)

    async def _transient(self, step: Callable[[], Awaitable[Any]]) -> Any:
        """Run a Batch API step, riding out connection failures, 429s and 5xx for up to ``transient_budget_s``.

        A batch may run for hours: a provider's blip of a few minutes must not fail the requests it holds.
        """
        waited, attempt = 0.0, 0
        while True:
            try:
                return await step()
            except Exception as exc:
                if not _transient(exc) or waited >= self.settings.transient_budget_s:
                    raise
                pause = min(_TRANSIENT_WAIT_S * 2**attempt, _TRANSIENT_MAX_WAIT_S)
                log.info("Batch API step failed (%s), again in %.1f s", exc, pause)
                await asyncio.sleep(pause)
                waited, attempt = waited + pause, attempt + 1

    async def aclose(self) -> None:
        """Cancel the broker's polls (the ledger keeps what is open for the next run)."""
        for timer in self._timers.values():
            timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _transient(exc: BaseException) -> bool:
    from cts.llm._retry import classify

    return classify(exc).kind in ("connection", "timeout", "server_error", "rate_limit")


def _infra(route: Route, message: str) -> CallError:
    return CallError(
        "connection", f"Batch API at {route.api_base or route.api}: {redact(message)}", route.api_base or route.api
    )


def batch_counts(loop: asyncio.AbstractEventLoop | None = None) -> BatchCounts:
    """The batches of every broker on ``loop`` (every loop's when None), summed."""
    found = [b.counts() for b in list(_LIVE) if loop is None or b.loop is loop]
    return BatchCounts(
        sum(c.submitted for c in found),
        sum(c.running for c in found),
        sum(c.done for c in found),
        max((c.oldest_s for c in found), default=0.0),
        sum(c.queued for c in found),
    )
