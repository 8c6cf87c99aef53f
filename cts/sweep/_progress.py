"""The sweep's progress bar: instances done of the total, requests sent, USD spent, requests in flight."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from tqdm.auto import tqdm

if TYPE_CHECKING:
    from cts.core.records import Record
    from cts.llm import InFlight

__all__ = ["SweepProgress"]


class _Totals(Protocol):
    def totals(self) -> tuple[float, float]:
        """Requests sent and USD billed so far."""
        ...


class SweepProgress:
    """One bar for the sweep: instances done / total, requests sent, USD spent."""

    def __init__(self, session: _Totals, enabled: bool = True) -> None:
        self.session = session
        self.bar = tqdm(total=0, desc="sweep", unit="q", disable=not enabled, dynamic_ncols=True)
        self._lock = threading.Lock()
        self._postfix: dict[str, str] = {}

    def add(self, total: int, done: int) -> None:
        """A job joined the sweep with ``total`` instances, ``done`` of them already finished."""
        with self._lock:
            self.bar.total = (self.bar.total or 0) + total
            self.bar.update(done)

    def advance(self, record: Record) -> None:
        """One instance of some job finished."""
        with self._lock:
            self.bar.update(1)
            requests, cost = self.session.totals()
            self._postfix.update(requests=str(int(requests)), usd=f"{cost:.4f}")
            self.bar.set_postfix(self._postfix, refresh=False)

    def calls(self, in_flight: InFlight) -> None:
        """The LLM requests in flight now, and the age of the oldest."""
        with self._lock:
            self._postfix.update(in_flight.postfix())
            self.bar.set_postfix(self._postfix)

    def close(self) -> None:
        """Close the bar."""
        self.bar.close()
