"""Which call failures deserve a retry, and how long to wait before it.

Only rate limits (429), timeouts, connection errors and 5xx are retried; every
other 4xx fails at once. Classification reads the HTTP status and the class
names of the exception's MRO, so it needs no litellm import.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tenacity import AsyncRetrying

RETRYABLE_KINDS = frozenset({"rate_limit", "timeout", "connection", "server_error"})
_CONNECTION_NAMES = frozenset(
    {
        "APIConnectionError",
        "ConnectError",
        "ConnectionError",
        "ClientConnectorError",
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


def retrying(settings: Any) -> AsyncRetrying:
    """The retry policy of one call: retryable kinds only, Retry-After honoured, else jittered backoff.

    Args:
        settings: The runtime's :class:`cts.llm.LLMSettings` (``backoff``, ``max_attempts``).
    """
    from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential_jitter

    backoff = settings.backoff
    exponential = wait_exponential_jitter(initial=backoff.initial, max=backoff.max, jitter=backoff.jitter)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        after = classify(exc).retry_after_s if exc is not None else None
        return min(after, backoff.max_retry_after) if after is not None else exponential(state)

    return AsyncRetrying(
        stop=stop_after_attempt(max(1, settings.max_attempts)),
        wait=wait,
        retry=retry_if_exception(lambda exc: classify(exc).retryable),
        reraise=True,
    )
