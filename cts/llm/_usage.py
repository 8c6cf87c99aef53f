"""Per-role usage accounting for the job and for ``usage_scope`` blocks."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

from cts.core.types import SpendLimitReached

USAGE_KEYS: tuple[str, ...] = (
    "calls",
    "cache_hits",
    "errors",
    "requests",
    "tokens_in",
    "tokens_out",
    "tokens_reasoning",
    "truncated",
    "cost_usd",
    "saved_usd",
    "latency_s",
)
"""Counters kept per role: ``calls`` = ``complete`` invocations (cache hits and
failures included), ``cache_hits`` = those served from the cache, ``errors`` =
those that raised (CallError or SpendLimitReached), ``requests`` = HTTP requests sent
(retries included), tokens and cost = fresh (billed) completions only
(``tokens_reasoning`` is the hidden reasoning part of ``tokens_out``), ``truncated`` = replies
that stopped at the output cap (cache hits included: the text a role parses was cut),
``saved_usd`` = what the cache hits cost when first made, ``latency_s`` = wall time spent in ``complete``."""

Usage = dict[str, dict[str, float]]

_SCOPES: contextvars.ContextVar[tuple[Usage, ...]] = contextvars.ContextVar("cts_llm_usage", default=())


@dataclass(frozen=True)
class CallUsage:
    """What one ``complete`` call adds to the counters."""

    cached: bool
    failed: bool
    requests: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    latency_s: float
    saved_usd: float = 0.0
    tokens_reasoning: int = 0
    truncated: bool = False
    new_call: bool = True
    """False for a late reply to a call already counted (its tokens and cost land later)."""


def empty_usage() -> dict[str, float]:
    """A zeroed counter row."""
    return {key: 0.0 for key in USAGE_KEYS}


def add_call(usage: Usage, role: str, call: CallUsage) -> None:
    """Add one call's figures to ``usage[role]``."""
    row = usage.setdefault(role, empty_usage())
    row["calls"] += int(call.new_call)
    row["cache_hits"] += int(call.cached)
    row["errors"] += int(call.failed)
    row["requests"] += call.requests
    row["tokens_in"] += call.tokens_in
    row["tokens_out"] += call.tokens_out
    row["tokens_reasoning"] += call.tokens_reasoning
    row["truncated"] += int(call.truncated)
    row["cost_usd"] += call.cost_usd
    row["saved_usd"] += call.saved_usd
    row["latency_s"] += call.latency_s


def add_to_scopes(role: str, call: CallUsage) -> None:
    """Add one call to every ``usage_scope`` active in the current context."""
    for usage in _SCOPES.get():
        add_call(usage, role, call)


@contextlib.contextmanager
def usage_scope() -> Iterator[Usage]:
    """Collect per-role usage of every LLM call made inside the block.

    Context-variable based: calls in tasks created inside the block (which copy
    the context) are counted too; scopes nest, and each enclosing scope counts.

    Yields:
        A dict ``role -> {calls, cache_hits, requests, tokens_in, tokens_out, cost_usd, latency_s}``
        filled as calls complete.
    """
    usage: Usage = {}
    token = _SCOPES.set((*_SCOPES.get(), usage))
    try:
        yield usage
    finally:
        _SCOPES.reset(token)


def check_spend_limit(cap: float | None, prior_usd: float, spent_usd: float) -> None:
    """Raise :class:`SpendLimitReached` when ``prior_usd + spent_usd`` reached the cap (None = no cap).

    Args:
        prior_usd: What earlier runs into the same job dir spent.
        spent_usd: What this runtime spent.
    """
    spent = prior_usd + spent_usd
    if cap is not None and spent >= cap:
        prior = f" ({prior_usd:.4f} by earlier runs into this job dir)" if prior_usd else ""
        raise SpendLimitReached(f"LLM spend limit reached: {spent:.4f}{prior} >= max_usd {cap}")
