"""Requests a provider refuses as invalid: a configuration failure that stops the job.

A 400/422 answer says the request itself is wrong (a parameter the model does not
take, a model the key may not use, a prompt over the context): sending the same kind
of request again cannot succeed, and recording it as an instance's result would
commit a configuration mistake as data. The first such answer per (endpoint, model,
role) raises :class:`cts.core.types.RequestRejected`, which stops the job like an open
circuit breaker; later calls of that model in that role raise it at once.
"""

from __future__ import annotations

import json
import re
from typing import Any

from cts._util.secrets import redact
from cts.core.contracts import Route
from cts.core.types import RequestRejected
from cts.llm._spec import ModelSpec

REJECTED_KINDS = frozenset({"bad_request"})
"""Call failure kinds (:func:`cts.llm._retry.classify`) that mean the request is invalid."""
_JSON = re.compile(r"\{.*\}", re.DOTALL)


class Rejections:
    """The (endpoint, model, role) triples whose requests a provider rejected."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, str], RequestRejected] = {}

    def check(self, route: Route, spec: ModelSpec, role: str) -> None:
        """Raise the earlier rejection of this model in this role, if any."""
        earlier = self._seen.get((route.endpoint, route.model, role))
        if earlier is not None:
            raise RequestRejected(earlier.endpoint, earlier.model, earlier.role, earlier.last)

    def reject(self, route: Route, spec: ModelSpec, role: str, exc: BaseException) -> RequestRejected:
        """Remember and return the rejection of a request (``exc``: the provider's answer)."""
        model = f"{spec.name} ({route.model})"
        error = RequestRejected(route.endpoint, model, role, provider_message(exc))
        self._seen.setdefault((route.endpoint, route.model, role), error)
        return error


def provider_message(exc: BaseException) -> str:
    """The provider's own words for a rejected request: its error message and parameter, when its body says.

    Keys masked (:func:`cts._util.secrets.redact`): a provider may echo the key it was sent.
    """
    return redact(_provider_words(exc))


def _provider_words(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    body = getattr(exc, "body", None)  # litellm / openai errors carry the parsed error object
    body = (
        body
        if isinstance(body, dict) and body.get("message")
        else _error_body(getattr(getattr(exc, "response", None), "text", None) or text)
    )
    if not body:
        return text[:500]
    message = str(body.get("message") or "").strip()
    param = body.get("param")
    code = body.get("code") or body.get("type") or body.get("status")
    parts = [f"parameter `{param}`" if param else "", f"[{code}]" if code else "", message]
    status = getattr(exc, "status_code", None) or (m.group(1) if (m := re.search(r"\b(400|413|422)\b", text)) else None)
    lead = f"HTTP {status}: " if status else ""
    return (lead + " ".join(p for p in parts if p))[:500] or text[:500]


def _error_body(text: str) -> dict[str, Any]:
    """The ``error`` object of a JSON error body inside ``text`` (OpenAI, Anthropic and Gemini shapes)."""
    match = _JSON.search(text)
    if not match:
        return {}
    try:
        data = json.loads(match.group(0))
    except ValueError:
        return {}
    error = data.get("error", data) if isinstance(data, dict) else {}
    return error if isinstance(error, dict) else {}
