"""The shape of each LLM role's reply as a JSON schema, sent where the model's endpoint honours one.

A role asks for its reply's shape as OpenAI's ``response_format`` ``{"type": "json_schema", ...}``;
the request rules (:func:`cts.llm.applied_params`, ``request.structured_output`` of the model
file) send it in the endpoint's form, as JSON mode, or not at all. Every schema keeps to what
OpenAI's strict Structured Outputs, Anthropic's structured outputs (through litellm), Gemini's
``responseJsonSchema`` and llama.cpp's grammars all take: an object at the root, every property
required, no other property (``additionalProperties: false``), types, ``enum``, ``items``,
``minItems``/``maxItems`` and ``minimum``/``maximum`` only (no string lengths, no unions).

The parsers (:mod:`cts.roles.parse`) stay as they were, and read these shapes as well as the plain
forms the prompts ask for: a model without structured output is parsed as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from cts.core.types import LABELS
from cts.text.qtypes import QTYPES

_STRING: Mapping[str, Any] = {"type": "string"}
_STRINGS: Mapping[str, Any] = {"type": "array", "items": _STRING}


def response_format(name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI's ``response_format`` asking for a reply that ``schema`` describes (strict)."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", f"cts_{name}")[:64]  # OpenAI's rule for the name
    return {"type": "json_schema", "json_schema": {"name": safe, "schema": dict(schema), "strict": True}}


def strict_object(properties: Mapping[str, Any]) -> dict[str, Any]:
    """An object with exactly ``properties``, each of them required."""
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(properties),
        "additionalProperties": False,
    }


def questions(k: int) -> dict[str, Any]:
    """The clarifier's ``{"questions": [k strings]}``."""
    return strict_object({"questions": {"type": "array", "items": _STRING, "minItems": k, "maxItems": k}})


def turn(may_stop: bool) -> dict[str, Any]:
    """One sequential turn: ``{"question": ...}``, or ``{"stop": true, "question": ""}`` when stopping is allowed."""
    if not may_stop:
        return strict_object({"question": _STRING})
    return strict_object({"stop": {"type": "boolean"}, "question": _STRING})


def labels(ids: Sequence[str]) -> dict[str, Any]:
    """The judge's ``{nugget id: full|partial|none}`` over exactly ``ids``."""
    return strict_object({i: {"type": "string", "enum": list(LABELS)} for i in ids})


def answer() -> dict[str, Any]:
    """The User Answerer's ``{"answer": ...}`` (a minimal answer or ``unknown``)."""
    return strict_object({"answer": _STRING})


def query() -> dict[str, Any]:
    """The rewriter's ``{"query": ...}``."""
    return strict_object({"query": _STRING})


def question_types() -> dict[str, Any]:
    """The question typer's ``{"types": [labels]}``."""
    return strict_object({"types": {"type": "array", "items": {"type": "string", "enum": list(QTYPES)}, "minItems": 1}})


def decision() -> dict[str, Any]:
    """The gate's ``{"ask": bool, "confidence": 0..1}``."""
    return strict_object({"ask": {"type": "boolean"}, "confidence": {"type": "number", "minimum": 0, "maximum": 1}})


def gold(evidence_ids: Sequence[str]) -> dict[str, Any]:
    """The extractor's GOLD object: weighted nuggets citing ids of ``evidence_ids`` (any string when none)."""
    cited = {"type": "string", "enum": list(evidence_ids)} if evidence_ids else _STRING
    nugget = strict_object(
        {
            "id": _STRING,
            "text": _STRING,
            "weight": {"type": "integer", "enum": [1, 2, 3]},
            "evidence_ids": {"type": "array", "items": cited},
        }
    )
    return strict_object(
        {
            "nuggets": {"type": "array", "items": nugget, "minItems": 1},
            "must_cover": _STRINGS,
            "missing_evidence": _STRINGS,
            "unsupported_claims": _STRINGS,
        }
    )
