"""What a model's provider accepts in a request: the registry's ``request:`` node.

Each ``conf/model/<name>.yaml`` states, from its provider's documentation, which
sampling parameters the model rejects (OpenAI's reasoning models take no
``temperature`` other than 1), the name of the output-cap field, and how reasoning
tokens relate to that cap. :func:`rule_violations` turns a parameter the provider
rejects into a start-up error; :func:`request_params` builds the parameters of one
call: the model's and the role's parameters, plus the role's output cap under the
provider's field name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CAP_FIELDS: tuple[str, ...] = ("max_tokens", "max_completion_tokens", "max_output_tokens")
"""Spellings of an output cap a role or a model file may use; one is sent, under ``cap_param``."""


@dataclass(frozen=True)
class RequestRules:
    """The documented request rules of one model (``request:`` in its registry file).

    Attributes:
        cap_param: Request field of the output cap as litellm / the OpenAI format takes it
            (``max_completion_tokens`` for OpenAI's reasoning models, ``max_tokens`` elsewhere).
        rejected: Parameter -> the documented rule, for parameters the provider refuses.
        cap_includes_reasoning: Whether reasoning tokens count against the output cap
            (OpenAI's ``max_completion_tokens``, Gemini's ``maxOutputTokens``).
        reasoning_allowance: Tokens added to a role's cap for the model's reasoning when
            ``cap_includes_reasoning`` (so a 64-token answer is not starved by its thinking).
        structured_output: Whether the endpoint honours a JSON schema in ``response_format``.
        source: Where the rules are documented (cited in errors).
    """

    cap_param: str = "max_tokens"
    rejected: Mapping[str, str] = field(default_factory=dict)
    cap_includes_reasoning: bool = False
    reasoning_allowance: int = 0
    structured_output: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        if self.cap_param not in CAP_FIELDS:
            raise ValueError(f"request.cap_param must be one of {CAP_FIELDS}, got {self.cap_param!r}")
        object.__setattr__(self, "rejected", dict(self.rejected or {}))

    @classmethod
    def coerce(cls, value: RequestRules | Mapping[str, Any] | None) -> RequestRules:
        """Return ``value`` as RequestRules (None = no rules: everything is accepted)."""
        if isinstance(value, RequestRules):
            return value
        return cls(**{str(k): v for k, v in (value or {}).items() if not str(k).startswith("_")})

    def cap_for(self, role_cap: int) -> int:
        """The cap sent for a role whose output needs ``role_cap`` tokens."""
        return role_cap + (self.reasoning_allowance if self.cap_includes_reasoning else 0)


def rule_violations(name: str, model: str, rules: RequestRules, params: Mapping[str, Any]) -> list[str]:
    """One message per parameter of ``params`` that the model's provider rejects.

    Args:
        name: Registry name (``gpt``).
        model: litellm id (``openai/gpt-5.2``).
        rules: The model's request rules.
        params: The parameters a call would send (the model's and a role's).
    """
    where = f" ({rules.source})" if rules.source else ""
    return [f"model {name} ({model}) does not accept `{param}`: {rule}{where}"
            for param, rule in rules.rejected.items() if param in params]


def request_params(rules: RequestRules, params: Mapping[str, Any], role_cap: int | None) -> dict[str, Any]:
    """The parameters of one call: ``params`` with its output cap under ``rules.cap_param``.

    The cap is the smallest of ``role_cap`` (raised by the reasoning allowance where the
    provider counts reasoning against it) and any cap already in ``params``.
    """
    sent = {k: v for k, v in params.items() if k not in CAP_FIELDS}
    caps = [int(v) for k, v in params.items() if k in CAP_FIELDS and v is not None]
    if role_cap is not None:
        caps.append(rules.cap_for(int(role_cap)))
    if caps:
        sent[rules.cap_param] = min(caps)
    return sent
