"""Data contracts and role interfaces of the clarify-then-search protocol.

Field names follow the paper: ``blurred_query`` is the underspecified query ``q``
the Clarifier and Rewriter see; ``fused_query`` is the hidden intent ``q*`` that
only the User Answerer (and gold construction) sees.

Each role's Protocol takes exactly the inputs the closed-book protocol allows,
so leakage of ``fused_query`` into the Clarifier or Rewriter is impossible by
construction (and tested).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, NewType

CacheDir = NewType("CacheDir", Path)
"""Directory outside git for indexes, datasets and caches (``paths.cache_dir``), given by the composition layer."""

Label = Literal["full", "partial", "none"]
LABELS: tuple[Label, ...] = ("full", "partial", "none")
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Instance:
    """One benchmark item."""

    id: str
    blurred_query: str
    """The underspecified query ``q`` (the only query Clarifier and Rewriter see)."""
    fused_query: str
    """The hidden intent ``q*`` (seen by the User Answerer and gold construction only)."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Free-form metadata, e.g. ``language`` and ``ambiguity``."""


@dataclass(frozen=True)
class Evidence:
    """One archived evidence snippet that nuggets cite."""

    id: str
    source: str
    """A url or a corpus id (``local://<id>``)."""
    title: str
    snippet: str


@dataclass(frozen=True)
class Nugget:
    """An atomic, judgeable statement of the gold reference."""

    id: str
    text: str
    weight: int
    """Importance in {1, 2, 3}."""
    evidence_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Gold:
    """Static gold reference for one ``fused_query`` (built once, then read-only)."""

    instance_id: str
    nuggets: tuple[Nugget, ...]
    evidence: tuple[Evidence, ...] = ()
    must_cover: tuple[str, ...] = ()
    missing_evidence: tuple[str, ...] = ()
    unsupported_claims: tuple[str, ...] = ()
    provenance: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QA:
    """One clarification turn: question and the User Answerer's answer."""

    question: str
    answer: str

    @property
    def is_unknown(self) -> bool:
        """Whether the answer is the protocol's ``unknown``."""
        return self.answer == UNKNOWN


@dataclass(frozen=True)
class SearchFailure:
    """The call failure that ended a search run early (its ``end_reason`` is ``error``)."""

    kind: str
    """A :data:`CallErrorKind` (``timeout``, ``rate_limit``, ``server`` ...)."""
    message: str
    endpoint: str | None = None


@dataclass(frozen=True)
class SearchResult:
    """What a deep-search backend returns for one query."""

    answer: str
    answer_rule: str = "direct"
    """Which answer-extraction rule matched (``answer_tag``, ``unclosed_tag``, ``direct`` ...)."""
    end_reason: str = "answer"
    """Why the run ended: ``answer``, ``call_limit``, ``context_limit``, ``truncated`` or ``error``."""
    evidence: tuple[Evidence, ...] = ()
    """Every document the backend saw (search hits, visited pages), citable by id."""
    trace: tuple[Mapping[str, Any], ...] = ()
    """Every tool call and result (archived per job, not stored in the record)."""
    summary: Mapping[str, Any] = field(default_factory=dict)
    """Compact trace summary kept in the record (calls, searches, visits, tokens)."""
    failure: SearchFailure | None = None
    """Why the run ended early when ``end_reason`` is ``error`` (None otherwise)."""


@dataclass(frozen=True)
class GoldDraft:
    """What a nugget extractor returns, before validation and archiving."""

    nuggets: tuple[Nugget, ...]
    must_cover: tuple[str, ...] = ()
    missing_evidence: tuple[str, ...] = ()
    unsupported_claims: tuple[str, ...] = ()


class UnscoredError(Exception):
    """A role produced invalid output even after bounded re-asks.

    The item is recorded as unscored with ``reason``; it is never counted as 0.
    ``kind`` is ``truncated`` when the last reply stopped at the role's output cap.
    """

    def __init__(self, reason: str, kind: ErrorKind = "invalid_output") -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


CallErrorKind = Literal[
    "connection",  # refused, reset, DNS, TLS: no HTTP answer at all
    "timeout",
    "rate_limit",  # 429 after every retry
    "server_error",  # 5xx or an unparsable body after every retry
    "auth",  # 401/403, or the key variable is unset
    "not_found",  # 404: no such model (or route) on the endpoint
    "storage",  # the response cache (or another store) failed: corrupt file, full disk
    "bad_request",  # 400/413/422: the request itself is refused (e.g. too long)
    "client_error",  # any other 4xx
    "config",  # a tool is misconfigured (e.g. a search provider without its key)
    "network",  # a tool's transient failures persisted
    "search",  # a search provider answered with an error or an unreadable body
    "fetch",  # a page could not be read
    "batch",  # a batched request got no reply in max_submissions sendings (5xx, 429, timeout, expiry)
    "error",  # anything else
]
INFRA_CALL_KINDS: frozenset[str] = frozenset(
    {
        "connection",
        "timeout",
        "rate_limit",
        "server_error",
        "auth",
        "not_found",
        "storage",
        "config",
        "network",
        "search",
        "bad_request",
        "batch",
    }
)
"""Call failures that say nothing about the model's output: the instance is retried on resume.

``batch`` included: a batched request without a reply after its last sending failed on a 5xx, a
429, a timeout or an expired window, never on its content (older versions committed it as
``api_error``; a resume now runs those instances again)."""

INFRA_EXCEPTION_NAMES = frozenset(
    {
        "DatabaseError",
        "OperationalError",
        "InterfaceError",
        "InternalError",
        "OSError",
        "PermissionError",
        "ConnectionError",
        "BrokenPipeError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "TimeoutError",
    }
)
"""Exception classes whose failure is the machine's, not the instance's (cache or disk errors)."""

ErrorKind = Literal["invalid_output", "truncated", "no_weight", "api_error", "infra", "spend_limit", "exception"]
"""Why an instance (or an arm) has no score.

Results (committed, counted in ``n_unscored``): ``truncated`` (every reply stopped at the
role's output cap, after the bounded re-asks), ``invalid_output`` (invalid model output
after the bounded re-asks), ``no_weight`` (gold without weight), ``api_error`` (another 4xx
the endpoint answered), ``exception`` (a bug: the same input fails again). A request the
provider rejects as invalid (400/422) is no result: it stops the job (:class:`RequestRejected`),
and records older versions committed for it (``api_error`` ``bad_request: ...``) are retried.
Infrastructure (never committed, retried on resume): ``infra``. ``spend_limit`` stops the job.
"""


class SpendLimitReached(Exception):
    """The job's spend limit (``services.llm.spend.max_usd``) is reached; stop cleanly."""

    kind: ClassVar[str] = "spend_limit"
    """The job's stop reason (``stop_reason`` of ``summary.json`` and MLflow; older names: :mod:`cts.compat.job_dirs`)."""


class CircuitOpen(Exception):
    """An endpoint failed too many times in a row; the job stops cleanly (resume retries)."""

    kind: ClassVar[str] = "circuit_open"
    """The job's stop reason (``infra_failures.jsonl`` kind)."""

    def __init__(self, endpoint: str, failures: int, last: str) -> None:
        super().__init__(f"{endpoint}: {failures} consecutive connection-level failures, last: {last}")
        self.endpoint = endpoint
        self.failures = failures
        self.last = last


class RequestRejected(CircuitOpen):
    """The provider refused a request as invalid (HTTP 400/422): a configuration failure, not a result.

    A parameter the model does not take, a model the key may not use, a context too
    small for the prompt: every further call of that model in that role would fail the
    same way, so the job stops as for an open breaker (nothing committed; resume retries).
    """

    kind: ClassVar[str] = "request_rejected"

    def __init__(self, endpoint: str, model: str, role: str, message: str) -> None:
        Exception.__init__(self, f"the provider rejected a request of model {model} as {role} at {endpoint}: {message}")
        self.endpoint = endpoint
        self.model = model
        self.role = role
        self.failures = 1
        self.last = message


class CallError(Exception):
    """A model or tool call failed for good (after the retries it deserved)."""

    def __init__(self, kind: CallErrorKind | str, message: str, endpoint: str | None = None) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.endpoint = endpoint
        """The endpoint (api_base or provider) the failing call went to, when known."""

    @property
    def infra(self) -> bool:
        """Whether the failure is the infrastructure's, not the model's."""
        return self.kind in INFRA_CALL_KINDS
