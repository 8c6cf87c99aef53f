"""The claims a cache holds while their values are computed, renewed together.

A claim lives ``ttl_s`` unless renewed (so a killed job's claims free their keys within seconds).
A request can wait behind the endpoint's limiter for longer than that, so a sweep with hundreds of
requests queued renewed a claim per request every few seconds: in the paper grid, 17,000 store
transactions and trips off the event loop, about as many as the claims themselves. Here the claims
of one event loop are renewed on one timer's ticks, in one transaction a tick (:meth:`KVStore.renew
<cts.llm.store.KVStore.renew>`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

log = logging.getLogger(__name__)

Claim = tuple[str, str]
"""``(key, owner)``."""


class ClaimRenewals:
    """Every half ``period_s``, renews the claims held (or renewed) at least that long, in one trip.

    So no claim goes ``period_s`` without renewal (keep it well under the claims' lease), and claims
    taken a little apart share their renewals' transactions from the second one on. A timer of the
    claims' event loop ticks while any claim is held there: a loop that waits for its tasks before
    it stops (a sweep's end) waits for no renewal but one on its way to the store.

    Args:
        renew: Renews the given claims (one store trip, off the event loop).
        period_s: How long a claim goes without renewal.
    """

    def __init__(self, renew: Callable[[Sequence[Claim]], Awaitable[object]], period_s: float) -> None:
        self._renew = renew
        self.period_s = period_s
        self._held: dict[asyncio.AbstractEventLoop, dict[Claim, float]] = {}
        self._timers: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = {}
        self._renewing: set[asyncio.Task[None]] = set()
        self.renewed = 0
        """Claims renewed so far (for tests and benchmarks)."""

    def hold(self, key: str, owner: str) -> None:
        """Renew ``owner``'s claim on ``key`` until :meth:`drop` (call on the claim's event loop)."""
        loop = asyncio.get_running_loop()
        self._held.setdefault(loop, {})[(key, owner)] = loop.time()
        if loop not in self._timers:
            self._timers[loop] = loop.call_later(self.period_s / 2, self._tick, loop)

    def drop(self, key: str, owner: str) -> None:
        """Stop renewing the claim (its value is stored, or it is released)."""
        loop = asyncio.get_running_loop()
        held = self._held.get(loop)
        if held is None:
            return
        held.pop((key, owner), None)
        if not held:
            del self._held[loop]
            timer = self._timers.pop(loop, None)
            if timer is not None:
                timer.cancel()

    def held(self) -> int:
        """Claims held on the running loop."""
        return len(self._held.get(asyncio.get_running_loop(), {}))

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        held = self._held.get(loop)
        if not held:
            self._timers.pop(loop, None)
            return
        self._timers[loop] = loop.call_later(self.period_s / 2, self._tick, loop)
        now = loop.time()
        due = [claim for claim, since in held.items() if now - since >= self.period_s / 2]
        if not due:
            return
        for claim in due:
            held[claim] = now  # a failed renewal is tried again at the next tick
        task = loop.create_task(self._renew_due(due))
        self._renewing.add(task)
        task.add_done_callback(self._renewing.discard)

    async def _renew_due(self, due: list[Claim]) -> None:
        try:
            await self._renew(due)
        except Exception as exc:  # noqa: BLE001 - a lapsed lease only risks a duplicate request
            log.warning("could not renew %d cache claim(s): %s", len(due), exc)
            return
        self.renewed += len(due)
