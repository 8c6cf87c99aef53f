"""What a model's provider accepts in a request: the registry's ``request:`` node.

Each ``conf/model/<name>.yaml`` states, from its provider's documentation, which
request parameters the model rejects (OpenAI's reasoning models take no
``temperature`` other than 1), the name of the output-cap field, and how reasoning
tokens relate to that cap. :func:`rule_violations` turns a parameter the provider
rejects into a start-up error; :func:`request_params` builds the parameters of one
call: the model's and the role's parameters, plus the role's output cap under the
provider's field name.

``rejected`` names parameters refused whatever their value, ``rejected_values`` values
refused (``reasoning_effort: {none: ...}`` where thinking cannot be turned off; nested, so
that every config key stays a plain name MLflow can log). ``accepted_with`` lists the documented exceptions (GPT-5.2
takes ``temperature`` when ``reasoning_effort`` is ``none``), evaluated over the
parameters sent on top of the provider's ``defaults``; ``together`` lists parameters
refused in combination (Claude Sonnet 4.5: ``temperature`` and ``top_p``). The output
cap is never a rejected parameter: :func:`request_params` sends any cap spelling under
``cap_param``.

``structured_output`` says how the endpoint takes a JSON schema for the reply
(:data:`STRUCTURED_OUTPUTS`). A role asks for its reply's shape as OpenAI's
``response_format`` ``{"type": "json_schema", ...}`` (the form litellm maps to Gemini's
``responseJsonSchema`` and Anthropic's structured output); :func:`applied_params` sends it as
the endpoint takes it, or as ``{"type": "json_object"}`` where only JSON mode is documented
(only when the messages say JSON, which those providers require), or not at all, and says
what it changed (the request audit, the launch's warnings).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cts.compat.config import structured_output_mode

CAP_FIELDS: tuple[str, ...] = ("max_tokens", "max_completion_tokens", "max_output_tokens")
"""Spellings of an output cap a role or a model file may use; one is sent, under ``cap_param``."""

StructuredOutput = Literal["json_schema", "json_object_schema", "json_object", "none"]
STRUCTURED_OUTPUTS: tuple[StructuredOutput, ...] = ("json_schema", "json_object_schema", "json_object", "none")
"""How an endpoint takes a reply schema: ``json_schema`` (OpenAI's Structured Outputs, vLLM, sglang,
llama.cpp's ``llama-server``; litellm maps it for Gemini and Anthropic), ``json_object_schema``
(``{"type": "json_object", "schema": ...}``: llama-cpp-python's server, whose ``response_format``
type is ``text`` or ``json_object``), ``json_object`` (JSON mode without a schema: DeepSeek, Moonshot,
DashScope), ``none`` (no ``response_format``). ``true`` in a model file means ``json_schema``,
``false`` ``none``."""
_JSON_WORD = re.compile(r"json", re.IGNORECASE)

Condition = Mapping[str, Any]
"""Parameter -> value; holds when every listed parameter has that value."""


@dataclass(frozen=True)
class Together:
    """Parameters a provider refuses when sent in the same request."""

    params: tuple[str, ...]
    rule: str

    @classmethod
    def coerce(cls, value: Together | Mapping[str, Any]) -> Together:
        """Return ``value`` as Together (accepts ``{params: [...], rule: ...}``)."""
        if isinstance(value, Together):
            return value
        return cls(tuple(str(p) for p in value["params"]), str(value["rule"]))


@dataclass(frozen=True)
class RequestRules:
    """The documented request rules of one model (``request:`` in its registry file).

    Attributes:
        cap_param: Request field of the output cap as litellm / the OpenAI format takes it
            (``max_completion_tokens`` for OpenAI's reasoning models, ``max_tokens`` elsewhere).
        rejected: Parameter -> the documented rule, for parameters the provider refuses.
        rejected_values: Parameter -> {value -> the documented rule}, for values it refuses.
        accepted_with: Rejected parameter -> the condition (or list of conditions, any one
            suffices) under which the provider accepts it after all.
        defaults: The provider's values of parameters not sent (for ``accepted_with``).
        together: Parameters refused in combination, with their rule.
        cap_includes_reasoning: Whether reasoning tokens count against the output cap
            (OpenAI's ``max_completion_tokens``, Gemini's ``maxOutputTokens``).
        reasoning_allowance: Tokens added to a role's cap for the model's reasoning when
            ``cap_includes_reasoning`` (so a 64-token answer is not starved by its thinking).
        structured_output: How the endpoint takes a JSON schema for the reply (:data:`STRUCTURED_OUTPUTS`;
            ``true`` = ``json_schema``, ``false`` = ``none``).
        source: Where the rules are documented (cited in errors).
    """

    cap_param: str = "max_tokens"
    rejected: Mapping[str, str] = field(default_factory=dict)
    rejected_values: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    accepted_with: Mapping[str, Condition | Sequence[Condition]] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    together: tuple[Together, ...] = ()
    cap_includes_reasoning: bool = False
    reasoning_allowance: int = 0
    structured_output: StructuredOutput = "none"
    source: str = ""

    def __post_init__(self) -> None:
        if self.cap_param not in CAP_FIELDS:
            raise ValueError(f"request.cap_param must be one of {CAP_FIELDS}, got {self.cap_param!r}")
        mode = structured_output_mode(self.structured_output)
        if mode not in STRUCTURED_OUTPUTS:
            raise ValueError(f"request.structured_output must be one of {STRUCTURED_OUTPUTS}, got {mode!r}")
        object.__setattr__(self, "structured_output", mode)
        if self.reasoning_allowance < 0:
            raise ValueError(f"request.reasoning_allowance must be >= 0, got {self.reasoning_allowance}")
        caps = [key for key in [*(self.rejected or {}), *(self.rejected_values or {})] if key in CAP_FIELDS]
        if caps:
            raise ValueError(f"request.rejected may not name an output cap ({caps}): cap_param says which one is sent")
        object.__setattr__(self, "rejected", {str(k): str(v) for k, v in (self.rejected or {}).items()})
        object.__setattr__(
            self,
            "rejected_values",
            {
                str(k): {str(v): str(r) for v, r in dict(values).items()}
                for k, values in (self.rejected_values or {}).items()
            },
        )
        object.__setattr__(self, "accepted_with", dict(self.accepted_with or {}))
        object.__setattr__(self, "defaults", dict(self.defaults or {}))
        object.__setattr__(self, "together", tuple(Together.coerce(t) for t in self.together or ()))

    @classmethod
    def coerce(cls, value: RequestRules | Mapping[str, Any] | None) -> RequestRules:
        """Return ``value`` as RequestRules (None = no rules: everything is accepted)."""
        if isinstance(value, RequestRules):
            return value
        return cls(**{str(k): v for k, v in (value or {}).items() if not str(k).startswith("_")})

    def cap_for(self, role_cap: int) -> int:
        """The cap sent for a role whose output needs ``role_cap`` tokens."""
        return role_cap + (self.reasoning_allowance if self.cap_includes_reasoning else 0)

    def refused(self, params: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``(what, rule)`` per rule that ``params`` break, in the order the rules are listed.

        ``what`` names the parameter (``temperature``), the value (``reasoning_effort=none``)
        or the combination (``temperature + top_p``).
        """
        sent = {k: v for k, v in params.items() if v is not None}
        seen = {**self.defaults, **sent}
        found = [(key, rule) for key, rule in self.rejected.items() if key in sent and not self._excepted(key, seen)]
        found += [
            (f"{key}={value}", rule)
            for key, values in self.rejected_values.items()
            if key in sent
            for value, rule in values.items()
            if _same(sent[key], value) and not self._excepted(key, seen)
        ]
        found += [(" + ".join(t.params), t.rule) for t in self.together if all(p in sent for p in t.params)]
        return found

    def _excepted(self, param: str, seen: Mapping[str, Any]) -> bool:
        conditions = self.accepted_with.get(param)
        if conditions is None:
            return False
        options = [conditions] if isinstance(conditions, Mapping) else list(conditions)
        return any(all(k in seen and _same(seen[k], v) for k, v in c.items()) for c in options)


def rule_violations(name: str, model: str, rules: RequestRules, params: Mapping[str, Any]) -> list[str]:
    """One message per parameter of ``params`` that the model's provider rejects.

    Args:
        name: Registry name (``gpt``).
        model: litellm id (``openai/gpt-5.2``).
        rules: The model's request rules.
        params: The parameters a call would send (the model's and a role's).
    """
    where = f" ({rules.source})" if rules.source else ""
    return [f"model {name} ({model}) does not accept `{what}`: {rule}{where}" for what, rule in rules.refused(params)]


@dataclass(frozen=True)
class Applied:
    """The parameters of one call as sent, and what the rules changed on the way."""

    params: dict[str, Any]
    changes: tuple[str, ...] = ()
    """One line per parameter dropped or rewritten (``response_format json_schema -> json_object (...)``)."""


def request_params(rules: RequestRules, params: Mapping[str, Any], role_cap: int | None) -> dict[str, Any]:
    """The parameters of one call (see :func:`applied_params`; the messages are taken to say JSON)."""
    return applied_params(rules, params, role_cap).params


def applied_params(
    rules: RequestRules, params: Mapping[str, Any], role_cap: int | None, messages: Sequence[Mapping[str, Any]] = ()
) -> Applied:
    """The parameters of one call: ``params`` with its output cap under ``rules.cap_param`` and its
    ``response_format`` as the endpoint takes it (``rules.structured_output``).

    The cap is the smallest of ``role_cap`` (raised by the reasoning allowance where the
    provider counts reasoning against it) and any cap already in ``params``.

    Args:
        messages: The call's messages; JSON mode (``json_object``) is sent only when they say
            JSON, as DeepSeek, DashScope and OpenAI require. Empty: taken to say it (a config check).
    """
    sent = {k: v for k, v in params.items() if k not in CAP_FIELDS and k != "response_format"}
    caps = [int(v) for k, v in params.items() if k in CAP_FIELDS and v is not None]
    if role_cap is not None:
        caps.append(rules.cap_for(int(role_cap)))
    if caps:
        sent[rules.cap_param] = min(caps)
    changes = [f"{k} -> {rules.cap_param}" for k in params if k in CAP_FIELDS and k != rules.cap_param]
    wanted = params.get("response_format")
    if wanted is not None:
        says_json = not messages or any(_JSON_WORD.search(str(m.get("content") or "")) for m in messages)
        shaped, change = shaped_response_format(rules.structured_output, wanted, says_json)
        if shaped is not None:
            sent["response_format"] = shaped
        changes += [change] if change else []
    return Applied(sent, tuple(changes))


def response_format_kind(value: Any) -> str:
    """``json_schema``, ``json_object_schema``, ``json_object``, ``text`` (or ``?``) of a ``response_format``."""
    kind = str(value.get("type")) if isinstance(value, Mapping) else "?"
    return "json_object_schema" if kind == "json_object" and isinstance(value, Mapping) and "schema" in value else kind


def shaped_response_format(
    mode: StructuredOutput, value: Any, says_json: bool = True
) -> tuple[dict[str, Any] | None, str]:
    """``value`` (a ``response_format``) as an endpoint of ``mode`` takes it, and the change made ("" if none).

    A schema (OpenAI's ``json_schema`` form, or llama-cpp-python's ``json_object`` with ``schema``)
    is sent in the endpoint's form; where the endpoint takes JSON mode only, as ``json_object``
    when the messages say JSON (else nothing: those providers refuse it); nothing where it takes none.
    """
    kind = response_format_kind(value)
    if kind == "?":
        return None, f"response_format dropped: not a mapping with a type ({value!r})"
    schema = _schema_of(value)
    if mode == "none":
        return None, f"response_format {kind} dropped (request.structured_output: none)"
    if kind == "text":
        return dict(value), ""
    if schema is not None and mode == "json_schema":
        if kind == "json_schema":
            return dict(value), ""
        shaped = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}
        return shaped, f"response_format {kind} -> json_schema"
    if schema is not None and mode == "json_object_schema":
        change = "" if kind == "json_object_schema" else f"response_format {kind} -> json_object_schema"
        return {"type": "json_object", "schema": schema}, change
    if not says_json:
        return None, f"response_format {kind} dropped: JSON mode needs the word JSON in the messages"
    change = (
        "" if kind == "json_object" else f"response_format {kind} -> json_object (request.structured_output: {mode})"
    )
    return {"type": "json_object"}, change


def _schema_of(value: Mapping[str, Any]) -> dict[str, Any] | None:
    if isinstance(value.get("schema"), Mapping):
        return dict(value["schema"])
    inner = value.get("json_schema")
    if isinstance(inner, Mapping) and isinstance(inner.get("schema"), Mapping):
        return dict(inner["schema"])
    return None


def _same(actual: Any, expected: Any) -> bool:
    """Config-level equality: 1 == 1.0 == "1", "none" == "None", True == "true"."""
    try:
        return float(actual) == float(expected)
    except (TypeError, ValueError):
        return str(actual).strip().lower() == str(expected).strip().lower()
