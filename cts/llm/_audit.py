"""The request audit: per role, the parameters its requests carried, as the provider received them.

The runtime adds every call to the :func:`audit_scope` blocks around it (context variables, as
:func:`cts.llm.usage_scope`): what the role asked for, what the request rules sent
(:func:`cts.llm.applied_params`: a cap renamed, a ``response_format`` reshaped or dropped) and,
for a request that went out, its body as the provider got it (the plain JSON of the ``openai``
transport, or the body litellm built for the provider's own API: Gemini's ``generationConfig``,
Anthropic's ``output_format``), the messages left out. A job logs it (``cts.tracking``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

CONTENT_KEYS = frozenset({"messages", "contents", "system", "system_instruction", "systemInstruction"})
"""Body keys of the conversation itself (OpenAI, Anthropic, Gemini), left out of the audit."""


@dataclass
class RoleRequests:
    """What one role's requests carried in a job (its first call of each kind)."""

    model: str
    api_base: str | None
    requested: dict[str, Any]
    """The first call's parameters as the role and the model file asked (before the request rules)."""
    sent: dict[str, Any]
    """The same call's parameters after the request rules."""
    changes: list[str] = field(default_factory=list)
    """Every distinct change the rules made (a parameter dropped or rewritten), over all calls."""
    wire: dict[str, Any] | None = None
    """The body of the first request that went out, as the provider received it (None: all from the cache)."""
    calls: int = 0
    sent_requests: int = 0

    def as_json(self) -> dict[str, Any]:
        """The entry as the audit artifact stores it."""
        return {
            "model": self.model,
            "api_base": self.api_base,
            "requested": self.requested,
            "sent": self.sent,
            "changes": list(self.changes),
            "wire": self.wire,
            "calls": self.calls,
            "sent_requests": self.sent_requests,
        }


Audit = dict[str, RoleRequests]
_SCOPES: contextvars.ContextVar[tuple[Audit, ...]] = contextvars.ContextVar("cts_request_audit", default=())


@contextlib.contextmanager
def audit_scope() -> Iterator[Audit]:
    """Collect, per role, the requests of every LLM call made inside the block (tasks it starts included)."""
    audit: Audit = {}
    token = _SCOPES.set((*_SCOPES.get(), audit))
    try:
        yield audit
    finally:
        _SCOPES.reset(token)


def note_call(
    role: str,
    model: str,
    api_base: str | None,
    requested: Mapping[str, Any],
    sent: Mapping[str, Any],
    changes: tuple[str, ...],
) -> None:
    """Add one call (before it is sent) to every active scope."""
    for audit in _SCOPES.get():
        entry = audit.get(role)
        if entry is None:
            entry = audit[role] = RoleRequests(model, api_base, dict(requested), dict(sent))
        entry.calls += 1
        entry.changes += [c for c in changes if c not in entry.changes]


def note_wire(role: str, body: Mapping[str, Any]) -> None:
    """Add the body of a request that went out (the conversation left out) to every active scope."""
    params = {k: v for k, v in body.items() if k not in CONTENT_KEYS}
    for audit in _SCOPES.get():
        entry = audit.get(role)
        if entry is None:
            continue
        entry.sent_requests += 1
        if entry.wire is None:
            entry.wire = params
