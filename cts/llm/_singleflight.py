"""Single flight: callers asking for the same key while its work runs share one result.

Used for in-flight LLM request coalescing (a request identical to one already
sent waits for its reply) and for the orig arm shared by the jobs of a sweep.
The shared work runs in its own task, so a cancelled caller does not cancel it
for the others; it is cancelled only when every caller has gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Flight(Generic[T]):
    task: asyncio.Task[T]
    waiters: int = 0


class SingleFlight(Generic[T]):
    """Deduplicate concurrent work by key (one event loop).

    Args:
        keep: Remember finished results (per key) for later callers too.
    """

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep
        self._flights: dict[Hashable, _Flight[T]] = {}
        self._done: dict[Hashable, T] = {}
        self.started = 0
        self.joined = 0

    async def run(self, key: Hashable, work: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """Return ``work()``'s result for ``key``, running it only if no caller already is.

        Returns:
            The result and whether this caller started the work (False = shared).
        """
        if key in self._done:
            self.joined += 1
            return self._done[key], False
        flight = self._flights.get(key)
        leader = flight is None
        if flight is None:
            flight = _Flight(asyncio.ensure_future(work()))
            self._flights[key] = flight
            flight.task.add_done_callback(lambda t: self._finished(key, t))
            self.started += 1
        else:
            self.joined += 1
        flight.waiters += 1
        try:
            return await asyncio.shield(flight.task), leader
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and not flight.task.done():
                flight.task.cancel()  # every caller left (cancelled): stop the work

    def _finished(self, key: Hashable, task: asyncio.Task[T]) -> None:
        if self._flights.get(key) is not None and self._flights[key].task is task:
            del self._flights[key]
        if self.keep and not task.cancelled() and task.exception() is None:
            self._done[key] = task.result()

    def __contains__(self, key: Hashable) -> bool:
        """Whether work for ``key`` runs now (or finished, when results are kept)."""
        return key in self._flights or key in self._done

    def __len__(self) -> int:
        return len(self._flights)
