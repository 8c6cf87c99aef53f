"""Failure classification and Retry-After parsing (pure functions)."""

from __future__ import annotations

import email.utils
import json

import pytest

from cts.llm._retry import classify, parse_retry_after


class FakeStatusError(Exception):
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"status {status}")
        self.status_code = status
        self.litellm_response_headers = headers or {}


class RateLimitError(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "kind", "retryable"),
    [
        (FakeStatusError(429), "rate_limit", True),
        (RateLimitError("slow down"), "rate_limit", True),
        (FakeStatusError(500), "server_error", True),
        (FakeStatusError(503), "server_error", True),
        (FakeStatusError(408), "timeout", True),
        (TimeoutError(), "timeout", True),
        (ConnectionRefusedError(), "connection", True),
        (FakeStatusError(400), "bad_request", False),
        (FakeStatusError(401), "auth", False),
        (FakeStatusError(404), "not_found", False),
        (FakeStatusError(409), "client_error", False),
        (ValueError("bug"), "error", False),
    ],
)
def test_classify(exc: BaseException, kind: str, retryable: bool) -> None:
    failure = classify(exc)
    assert (failure.kind, failure.retryable) == (kind, retryable)


def test_classify_follows_the_cause_chain() -> None:
    try:
        try:
            raise ConnectionRefusedError
        except ConnectionRefusedError as inner:
            raise FakeStatusError(500) from inner  # litellm wraps a refused connection as a 500
    except FakeStatusError as outer:
        assert classify(outer).kind == "connection"
    try:
        json.loads("{not json")
    except ValueError as bad_body:
        assert classify(bad_body).kind == "server_error"


def test_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "-5"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert parse_retry_after({"Retry-After": date}, now=1_000_000) == pytest.approx(30)
    assert classify(FakeStatusError(429, {"Retry-After": "7"})).retry_after_s == 7.0
