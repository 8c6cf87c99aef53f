"""Which call failures deserve a retry, and how long to wait before it.

Only rate limits (429), timeouts, connection errors and 5xx are retried; every
other 4xx fails at once. Classification reads the HTTP status and the class
names of the exception's MRO, so it needs no litellm import. Each kind has its
own allowance (:class:`RetryAllowance`): a 429 is the server asking for time, not a
failure of the request, so it is retried for as long as the waits stay within a
time bound, while a timed-out request is retried only a few times.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cts._util.secrets import redact

T = TypeVar("T")

RETRYABLE_KINDS = frozenset({"rate_limit", "timeout", "connection", "server_error"})
_CONNECTION_NAMES = frozenset(
    {
        "APIConnectionError",
        "ConnectError",
        "ConnectionError",
        "ClientConnectorError",
        "ClientConnectionError",  # aiohttp: ClientOSError, ServerDisconnectedError ... (the openai transport)
        "ClientPayloadError",  # aiohttp: the connection closed mid-body
        "ServerDisconnectedError",
        "RemoteProtocolError",
        "ReadError",
        "NetworkError",  # httpx: connect, read, write and close errors
    }
)
_CLIENT_KINDS = {
    400: "bad_request",
    401: "auth",
    403: "auth",
    404: "not_found",
    413: "bad_request",
    422: "bad_request",
}


@dataclass(frozen=True)
class Failure:
    """A classified call failure."""

    kind: str
    status: int | None
    retry_after_s: float | None

    @property
    def retryable(self) -> bool:
        """Whether another attempt can succeed."""
        return self.kind in RETRYABLE_KINDS


def classify(exc: BaseException) -> Failure:
    """Map an exception from a model call to a :class:`Failure`."""
    names = _chain_names(exc)
    status = _status(exc)
    retry_after = parse_retry_after(_headers(exc))
    if names & {"Timeout", "APITimeoutError", "TimeoutError", "TimeoutException"} or status == 408:
        kind = "timeout"
    elif status == 429 or "RateLimitError" in names:
        kind = "rate_limit"
    elif names & _CONNECTION_NAMES:
        kind = "connection"  # litellm reports a refused connection as a 500
    elif (status is not None and status >= 500) or "JSONDecodeError" in names:
        # an unparsable response body is the server's fault, as litellm also reports it
        kind = "server_error"
    elif status is not None and 400 <= status < 500:
        kind = _CLIENT_KINDS.get(status, "client_error")
    else:
        kind = "error"
    return Failure(kind, status, retry_after)


def said(exc: BaseException, timeout_s: float) -> str:
    """What a failed request said; a timeout (often an empty message) says how long it waited."""
    if classify(exc).kind == "timeout":
        return f"no answer within {timeout_s:g} s"
    return redact(str(exc))  # a provider may echo the key in its error body


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait from ``Retry-After`` / ``retry-after-ms`` headers, if any.

    Accepts delta-seconds and HTTP dates; returns None when absent or unparsable.
    """
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def _chain_names(exc: BaseException) -> set[str]:
    """Class names along the exception, its MRO and its causes (litellm wraps errors)."""
    names: set[str] = set()
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names.update(cls.__name__ for cls in type(current).__mro__)
        current = current.__cause__ or current.__context__
    return names


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    try:
        return int(status) if status is not None else None
    except (TypeError, ValueError):
        return None


def _headers(exc: BaseException) -> Mapping[str, str] | None:
    headers: Any = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    return headers if isinstance(headers, Mapping) or hasattr(headers, "items") else None


_JITTER = random.Random()
"""The jitter's source: one per process (seeding a Random from os.urandom per call costs more than the call)."""


@dataclass
class RetryAllowance:
    """What one call has used of its retries; :meth:`wait` decides the next step.

    Each kind of failure has its own allowance, so a 429 does not use up the attempts of a
    hard failure: 429s are retried while the call's total wait on them stays within
    ``rate_limit_wait_s`` (each wait charged at least ``backoff.initial``, so a
    ``Retry-After: 0`` cannot loop forever); timeouts at most ``max_timeout_attempts``
    times; every other retryable failure (timeouts included) ``max_attempts`` times.

    Args:
        settings: The runtime's :class:`cts.llm.LLMSettings`.
        rng: Source of the jitter (seeded in tests).
    """

    settings: Any
    rng: random.Random = field(default_factory=lambda: _JITTER)
    failed: int = 0
    timeouts: int = 0
    rate_limited: int = 0
    rate_limit_waited_s: float = 0.0

    def wait(self, failure: Failure) -> float | None:
        """Seconds to wait before the next attempt, or None when the call must fail now."""
        if not failure.retryable:
            return None
        if failure.kind == "rate_limit":
            return self._rate_limit_wait(failure)
        self.failed += 1
        self.timeouts += failure.kind == "timeout"
        if self.failed >= self.settings.max_attempts or self.timeouts >= self.settings.max_timeout_attempts:
            return None
        told = self._told(failure)
        return told if told is not None else self._exponential(self.failed)

    def _rate_limit_wait(self, failure: Failure) -> float | None:
        self.rate_limited += 1
        told = self._told(failure)
        wait = told if told is not None else self._exponential(self.rate_limited)
        charged = max(wait, self.settings.backoff.initial)
        if self.rate_limit_waited_s + charged > self.settings.rate_limit_wait_s:
            return None
        self.rate_limit_waited_s += charged
        return wait

    def _told(self, failure: Failure) -> float | None:
        """The server's Retry-After (bounded) plus jitter, so the calls it stopped do not return in step."""
        if failure.retry_after_s is None:
            return None
        backoff = self.settings.backoff
        return min(failure.retry_after_s, backoff.max_retry_after) + self.rng.uniform(0, backoff.jitter)

    def _exponential(self, n: int) -> float:
        backoff = self.settings.backoff
        return min(backoff.initial * 2 ** (n - 1) + self.rng.uniform(0, backoff.jitter), backoff.max)


class Retrying:
    """The retry policy of one call (see :class:`RetryAllowance`), run by tenacity; the slot is free while it waits.

    Args:
        settings: The runtime's :class:`cts.llm.LLMSettings`.
        before_wait: Called before each wait; raising there ends the call (e.g. an open breaker).
    """

    def __init__(self, settings: Any, before_wait: Callable[[], None] | None = None) -> None:
        self.allowance = RetryAllowance(settings)
        self.before_wait = before_wait
        self._next_wait: float | None = None
        self._decided_for = 0

    async def __call__(self, attempt: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``attempt(*args)`` until it succeeds or its failure has no retry left (re-raised).

        The first attempt runs on its own: most calls succeed at once, and tenacity's machinery
        costs more CPU than the call's own bookkeeping. A first failure is decided as tenacity
        would (the allowance, then ``before_wait``, then the wait), and tenacity runs the rest.
        """
        try:
            return await attempt(*args)
        except Exception as exc:
            failure = classify(exc)
            wait = self.allowance.wait(failure) if failure.retryable else None
            if wait is None:
                raise
        self._before_sleep(None)
        await asyncio.sleep(wait)
        return await self._retried(attempt, *args)

    async def _retried(self, attempt: Callable[..., Awaitable[T]], *args: Any) -> T:
        from tenacity import AsyncRetrying, retry_if_exception

        policy = AsyncRetrying(
            stop=self._stop,
            wait=self._wait,
            before_sleep=self._before_sleep,
            reraise=True,
            retry=retry_if_exception(lambda exc: classify(exc).retryable),
        )
        return await policy(attempt, *args)

    def _decide(self, state: Any) -> float | None:
        """The allowance's decision for the failed attempt (tenacity asks wait and stop for each: decide once)."""
        if self._decided_for != state.attempt_number:
            exc = state.outcome.exception() if state.outcome else None
            self._next_wait = self.allowance.wait(classify(exc)) if exc is not None else None
            self._decided_for = state.attempt_number
        return self._next_wait

    def _stop(self, state: Any) -> bool:
        return self._decide(state) is None

    def _wait(self, state: Any) -> float:
        return self._decide(state) or 0.0

    def _before_sleep(self, state: Any) -> None:
        if self.before_wait is not None:
            self.before_wait()


def retrying(settings: Any, before_wait: Callable[[], None] | None = None) -> Retrying:
    """The retry policy of one call: retryable kinds only, each within its own allowance.

    Args:
        settings: The runtime's :class:`cts.llm.LLMSettings` (``backoff``, ``max_attempts``,
            ``max_timeout_attempts``, ``rate_limit_wait_s``).
        before_wait: Called before each wait (see :class:`Retrying`).
    """
    return Retrying(settings, before_wait)
