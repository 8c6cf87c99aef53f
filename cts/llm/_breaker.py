"""A circuit breaker per endpoint: stop a job whose endpoint keeps failing.

Only connection-level failures count (no HTTP answer, a timeout, 401/403, 404
model not found, a broken response cache): a 429 or a 5xx means the server is
alive and is handled by the retries. Any answered request resets the count.
Timeouts are also counted on their own, against a smaller threshold: each one
takes a whole request timeout, so an endpoint that never answers in time would
otherwise hold the job for ``breaker_failures`` timeouts; with ``breaker_timeouts``
it stops within about that many timeouts (fewer when calls run in parallel).
Once open, the breaker stays open for the rest of the job: every call to that
endpoint raises :class:`cts.core.types.CircuitOpen` at once, so the job stops cleanly
instead of burning through every instance; a resume runs the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cts.core.types import CircuitOpen

BREAKER_KINDS = frozenset({"connection", "timeout", "auth", "not_found", "storage"})


@dataclass
class CircuitBreaker:
    """Consecutive connection-level failures (and, apart, timeouts) per endpoint.

    Args:
        threshold: Failures in a row that open the breaker (None or 0: never).
        timeout_threshold: Timeouts in a row that open it (None or 0: only ``threshold`` counts them).
    """

    threshold: int | None = 20
    timeout_threshold: int | None = None
    _failures: dict[str, int] = field(default_factory=dict)
    _timeouts: dict[str, int] = field(default_factory=dict)
    _last: dict[str, str] = field(default_factory=dict)
    _open: set[str] = field(default_factory=set)

    def check(self, endpoint: str) -> None:
        """Raise :class:`CircuitOpen` if ``endpoint``'s breaker is open."""
        if endpoint in self._open:
            raise CircuitOpen(endpoint, self._failures[endpoint], self._last[endpoint])

    def failure(self, endpoint: str, kind: str, message: str) -> None:
        """Count one failed request (only connection-level kinds count)."""
        if kind not in BREAKER_KINDS:
            self.success(endpoint)  # the endpoint answered: it is alive
            return
        if endpoint in self._open:
            return  # open for good: its message names the failures that opened it
        self._failures[endpoint] = self._failures.get(endpoint, 0) + 1
        self._timeouts[endpoint] = self._timeouts.get(endpoint, 0) + 1 if kind == "timeout" else 0
        self._last[endpoint] = f"{kind}: {message}"[:500]
        if self.threshold and self._failures[endpoint] >= self.threshold:
            self._open.add(endpoint)
        elif self.timeout_threshold and self._timeouts[endpoint] >= self.timeout_threshold:
            streak = f" ({self._timeouts[endpoint]} timeouts in a row: services.llm.breaker_timeouts)"
            self._last[endpoint] = self._last[endpoint][: 500 - len(streak)] + streak
            self._open.add(endpoint)

    def success(self, endpoint: str) -> None:
        """An answered request resets the counts (an open breaker stays open)."""
        if endpoint not in self._open:
            self._failures[endpoint] = 0
            self._timeouts[endpoint] = 0

    @property
    def open_endpoints(self) -> tuple[str, ...]:
        """Endpoints whose breaker is open."""
        return tuple(sorted(self._open))
