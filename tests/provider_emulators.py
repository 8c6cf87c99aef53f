"""Loopback emulators of the hosted LLM APIs the registry names, applying their documented rules.

Each emulator is a stdlib ``ThreadingHTTPServer`` on 127.0.0.1 (ephemeral port) that speaks
one provider's wire format and refuses, with that provider's status and error body, what
its documentation says it refuses (the rules and their sources are in ``conf/model/*.yaml``):

* :class:`OpenAIEmulator`: ``POST /v1/chat/completions``. Reasoning models (``gpt-5*``,
  ``o1``/``o3``/``o4``) refuse ``max_tokens`` (400 ``unsupported_parameter``) and a
  ``temperature``/``top_p`` other than 1 (400 ``unsupported_value``, OpenAI's own message)
  unless ``reasoning_effort`` is ``none`` (GPT-5.1/5.2 only, and their default); replies
  carry ``usage.completion_tokens_details.reasoning_tokens``.
* :class:`QianfanEmulator`: ``POST /v2/chat/completions``, OpenAI-shaped, Qianfan's error
  body ``{"error": {"code", "message", "type"}, "id"}``; ERNIE's temperature range, last
  message from the user.
* :class:`CompatibleEmulator`: DeepSeek / Moonshot / DashScope (OpenAI format, their ranges).
* :class:`VLLMEmulator`: a vLLM-style OpenAI server (accepts extra sampling params; 400 when
  prompt + ``max_tokens`` exceeds its context).
* :class:`AnthropicEmulator`: ``POST /v1/messages`` (``x-api-key``, ``anthropic-version``,
  required ``max_tokens``, content blocks incl. ``thinking``, ``stop_reason``, ``usage``);
  Claude Sonnet 4.5 refuses ``temperature`` with ``top_p``.
* :class:`GeminiEmulator`: ``POST /v1beta/models/{model}:generateContent`` (``x-goog-api-key``,
  candidates/parts, thought-summary parts (``"thought": true``) when ``includeThoughts``,
  ``finishReason``, ``usageMetadata.thoughtsTokenCount``); 2.5 Pro cannot
  turn thinking off (``thinkingBudget`` 128-32768); unknown ``generationConfig`` fields are 400.

Structured output, as each documents it: OpenAI takes ``response_format`` ``json_object`` (the
messages must say JSON) or ``json_schema`` (a name, and in strict mode an object root whose objects
all set ``additionalProperties: false`` and require every property, with only the keywords strict
mode supports); vLLM takes both; DeepSeek, Moonshot and DashScope take ``json_object`` only (the
messages must say JSON); Anthropic takes ``output_format`` ``{type: json_schema, schema}`` with the
beta header ``structured-outputs-2025-11-13`` (objects closed, no numeric or length bounds, ``minItems``
0 or 1); Gemini takes ``responseMimeType: application/json`` with ``responseJsonSchema`` or
``responseSchema`` (not both); :class:`LlamaCppEmulator` (llama-cpp-python's server) takes
``response_format`` types ``text`` and ``json_object`` (with an optional ``schema``) and answers 422
to any other. A reply under a schema is the deterministic model's reply shaped to it, as constrained
decoding would (:func:`conform`); one that still breaks the schema is kept in ``emulator.violations``.

Replies come from ``handler(openai_style_body) -> text`` (default :func:`llm_fakes.protocol_reply`,
valid answers to prompts A-E and WebDancer turns), so a whole job runs. Hidden reasoning tokens
count against the request's cap where the provider counts them: a cap below reasoning + reply
ends the reply early with the provider's length stop (``length`` / ``max_tokens`` / ``MAX_TOKENS``).
Every request is kept in ``emulator.requests`` (path, query, lower-cased headers, JSON body),
every answer in ``emulator.answers`` and every refused POST in ``emulator.refusals`` (status, body);
``GET`` model listings authenticate as the provider does (``emulator.get_refusals``). A request's
body as received is kept too (``Seen.raw``: a multipart upload is not JSON), and a route may answer
a non-JSON body (:class:`RawBody`: a JSONL file); ``tests/batch_emulators.py`` builds the providers'
batch APIs on both.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema

from tests.llm_fakes import approx_reply_tokens, protocol_reply

Handler = Callable[[Any], str]
EFFORT_TOKENS = {"none": 0, "minimal": 16, "low": 96, "medium": 384, "high": 1536, "xhigh": 4096}
"""Reasoning tokens an OpenAI reasoning model spends per reply at each effort (deterministic)."""


@dataclass(frozen=True)
class Seen:
    """One request an emulator received."""

    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    body: Any
    raw: bytes = b""
    """The body as received (``body`` is its JSON, or ``None`` when it is not JSON, as a multipart upload)."""


@dataclass(frozen=True)
class RawBody:
    """An answer that is not JSON (a JSONL file's bytes), sent as is with its content type."""

    data: bytes
    content_type: str = "application/octet-stream"


class Refusal(Exception):
    """A request the provider refuses: its HTTP status and error body."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        super().__init__(json.dumps(body))
        self.status, self.body = status, dict(body)


def tokens(text: str) -> int:
    """The emulators' token count of ``text`` (about 4 characters a token)."""
    return approx_reply_tokens(text) if text else 0


def cut(text: str, budget: int | None, hidden: int) -> tuple[str, bool]:
    """``text`` as a reply capped at ``budget`` tokens of which ``hidden`` went to reasoning."""
    if budget is None or hidden + tokens(text) <= budget:
        return text, False
    return text[: max(0, budget - hidden) * 4], True


class Emulator:
    """Common HTTP plumbing: record, route, answer or refuse (subclasses speak the format)."""

    def __init__(self, handler: Handler = protocol_reply) -> None:
        self.handler = handler
        self.requests: list[Seen] = []
        self.refusals: list[tuple[int, dict[str, Any]]] = []
        self.answers: list[dict[str, Any]] = []
        self.get_refusals: list[tuple[int, dict[str, Any]]] = []  # GETs (model listings, the pre-flight probe)
        self.violations: list[tuple[str, str]] = []  # (reply, reason) of replies that break their schema
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(self))
        self._httpd.daemon_threads = True
        self._httpd.request_queue_size = 256

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (append the provider's base path as its clients expect)."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> Emulator:  # noqa: PYI034
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def bodies(self, path_part: str = "") -> list[Any]:
        """JSON bodies of the POSTs whose path contains ``path_part``."""
        with self._lock:
            return [s.body for s in self.requests if s.method == "POST" and path_part in s.path]

    def serve(self, seen: Seen) -> tuple[int, dict[str, Any] | RawBody]:
        with self._lock:
            self.requests.append(seen)
        try:
            if seen.method == "GET":
                return 200, self.listing(seen)
            answer = self.answer(seen)
            with self._lock:
                self.answers.append(answer)
            return 200, answer
        except Refusal as refusal:
            with self._lock:
                (self.refusals if seen.method == "POST" else self.get_refusals).append((refusal.status, refusal.body))
            return refusal.status, refusal.body

    def reply(self, messages: list[dict[str, Any]], schema: Mapping[str, Any] | None = None) -> str:
        """The deterministic model's reply to OpenAI-style ``messages``, shaped to ``schema`` when one is given."""
        text = self.handler({"messages": messages})
        if schema is None:
            return text
        shaped = conform(text, schema)
        try:
            jsonschema.validate(json.loads(shaped), schema)
        except (ValueError, jsonschema.ValidationError) as exc:
            with self._lock:
                self.violations.append((shaped, str(exc).splitlines()[0]))
        return shaped

    def listing(self, seen: Seen) -> dict[str, Any]:
        raise self.error(404, "not_found", f"no route for GET {seen.path}")

    def answer(self, seen: Seen) -> dict[str, Any]:
        raise NotImplementedError

    def error(self, status: int, code: str, message: str, param: str | None = None) -> Refusal:
        raise NotImplementedError


class OpenAIEmulator(Emulator):
    """OpenAI Chat Completions with the reasoning-model rules (see the module docstring)."""

    base_path = "/v1"
    reasoning_prefixes: tuple[str, ...] = ("gpt-5", "o1", "o3", "o4")
    effort_none_prefixes: tuple[str, ...] = ("gpt-5.1", "gpt-5.2")
    efforts_5_2 = ("none", "low", "medium", "high", "xhigh")

    @property
    def base_url(self) -> str:
        """The ``api_base`` a client is given (``http://127.0.0.1:<port>/v1``)."""
        return self.url + self.base_path

    def error(self, status: int, code: str, message: str, param: str | None = None) -> Refusal:
        kind = "invalid_request_error" if status < 500 else "server_error"
        return Refusal(status, {"error": {"message": message, "type": kind, "param": param, "code": code}})

    def listing(self, seen: Seen) -> dict[str, Any]:
        if seen.path != f"{self.base_path}/models":
            return super().listing(seen)
        self.authorise(seen)
        return {"object": "list", "data": []}

    def answer(self, seen: Seen) -> dict[str, Any]:
        self.authorise(seen)
        body = seen.body if isinstance(seen.body, dict) else {}
        if seen.path != f"{self.base_path}/chat/completions":
            raise self.error(404, "not_found", f"Invalid URL (POST {seen.path})")
        for field in ("model", "messages"):
            if not body.get(field):
                raise self.error(400, "missing_required_parameter", f"Missing required parameter: '{field}'.", field)
        hidden = self.check(body)
        schema = self.check_response_format(body)
        text, truncated = cut(self.reply(body["messages"], schema), self.cap(body), hidden)
        return self.completion(body, text, hidden, truncated)

    response_formats: tuple[str, ...] = ("text", "json_object", "json_schema")
    strict_schemas = True

    def check_response_format(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Refuse a ``response_format`` the provider refuses; return the schema the reply must follow."""
        value = body.get("response_format")
        if value is None:
            return None
        kind = value.get("type") if isinstance(value, Mapping) else None
        if kind not in self.response_formats:
            raise self.error(
                400,
                "invalid_value",
                f"Invalid value: '{kind}'. Supported values are: {', '.join(map(repr, self.response_formats))}.",
                "response_format.type",
            )
        if kind == "json_object":
            if not any("json" in str(m.get("content") or "").lower() for m in body["messages"]):
                raise self.error(
                    400,
                    "",
                    "'messages' must contain the word 'json' in some form, to use 'response_format' of type "
                    "'json_object'.",
                    "messages",
                )
            return {"type": "object"}
        if kind == "json_schema":
            return self.check_json_schema(value.get("json_schema") or {})
        return None

    def check_json_schema(self, spec: Mapping[str, Any]) -> Mapping[str, Any]:
        name = str(spec.get("name") or "")
        if not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
            raise self.error(
                400, "invalid_value", "Invalid 'response_format.json_schema.name': must match ^[a-zA-Z0-9_-]{1,64}$."
            )
        schema = spec.get("schema")
        if not isinstance(schema, Mapping):
            raise self.error(400, "", "Missing required parameter: 'response_format.json_schema.schema'.")
        if spec.get("strict") and self.strict_schemas:
            problem = strict_schema_problem(schema)
            if problem:
                raise self.error(
                    400,
                    "invalid_json_schema",
                    f"Invalid schema for response_format '{name}': {problem}",
                    "response_format",
                )
        return schema

    def authorise(self, seen: Seen) -> None:
        if not seen.headers.get("authorization", "").startswith("Bearer "):
            raise self.error(401, "invalid_api_key", "You didn't provide an API key.")

    def check(self, body: Mapping[str, Any]) -> int:
        """Refuse what the model refuses; return the reasoning tokens it will spend."""
        model = str(body["model"])
        if not model.startswith(self.reasoning_prefixes):
            return 0
        if "max_tokens" in body:
            raise self.error(
                400,
                "unsupported_parameter",
                "Unsupported parameter: 'max_tokens' is not supported "
                "with this model. Use 'max_completion_tokens' instead.",
                "max_tokens",
            )
        effort = str(body.get("reasoning_effort") or self.default_effort(model))
        self.check_effort(model, effort)
        if effort != "none":
            for param in ("temperature", "top_p"):
                if param in body and body[param] != 1:
                    raise self.error(
                        400,
                        "unsupported_value",
                        f"Unsupported value: '{param}' does not support "
                        f"{json.dumps(body[param])} with this model. Only the default (1) value is "
                        "supported.",
                        param,
                    )
            for param in ("logprobs", "presence_penalty", "frequency_penalty"):
                if body.get(param):
                    raise self.error(
                        400,
                        "unsupported_parameter",
                        f"Unsupported parameter: '{param}' is not supported with this model.",
                        param,
                    )
        return EFFORT_TOKENS.get(effort, 0)

    def default_effort(self, model: str) -> str:
        return "none" if model.startswith(self.effort_none_prefixes) else "medium"

    def check_effort(self, model: str, effort: str) -> None:
        allowed = (
            self.efforts_5_2 if model.startswith(self.effort_none_prefixes) else ("minimal", "low", "medium", "high")
        )
        if effort not in allowed:
            raise self.error(
                400,
                "unsupported_value",
                f"Unsupported value: 'reasoning_effort' does not support "
                f"'{effort}' with this model. Supported values are: {', '.join(allowed)}.",
                "reasoning_effort",
            )

    def cap(self, body: Mapping[str, Any]) -> int | None:
        value = body.get("max_completion_tokens", body.get("max_tokens"))
        return None if value is None else int(value)

    def completion(self, body: Mapping[str, Any], text: str, hidden: int, truncated: bool) -> dict[str, Any]:
        prompt = tokens("".join(str(m.get("content") or "") for m in body["messages"]))
        out = tokens(text) + hidden
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "logprobs": None,
                    "finish_reason": "length" if truncated else "stop",
                    "message": {"role": "assistant", "content": text, "refusal": None, "annotations": []},
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": out,
                "total_tokens": prompt + out,
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {
                    "reasoning_tokens": hidden,
                    "audio_tokens": 0,
                    "accepted_prediction_tokens": 0,
                    "rejected_prediction_tokens": 0,
                },
            },
        }


class VLLMEmulator(OpenAIEmulator):
    """vLLM's OpenAI-compatible server: extra sampling params accepted, context length enforced."""

    reasoning_prefixes = ()
    max_model_len = 32768
    strict_schemas = False  # guided decoding takes any JSON schema

    def error(self, status: int, code: str, message: str, param: str | None = None) -> Refusal:
        return Refusal(
            status, {"object": "error", "message": message, "type": "BadRequestError", "param": param, "code": status}
        )

    def authorise(self, seen: Seen) -> None:
        return None  # `vllm serve` without --api-key takes any or no key

    def check(self, body: Mapping[str, Any]) -> int:
        prompt = tokens("".join(str(m.get("content") or "") for m in body["messages"]))
        wanted = self.cap(body) or 0
        if prompt + wanted > self.max_model_len:
            raise self.error(
                400,
                "",
                f"This model's maximum context length is {self.max_model_len} tokens. "
                f"However, you requested {prompt + wanted} tokens ({prompt} in the messages, "
                f"{wanted} in the completion).",
            )
        return 0


class CompatibleEmulator(OpenAIEmulator):
    """An OpenAI-compatible provider API (DeepSeek, Moonshot, DashScope): its documented ranges and refusals.

    Args:
        ranges: Parameter -> inclusive (low, high) the provider accepts.
        refused: Parameter -> the provider's message when it is sent at all.
        handler: The deterministic model.
    """

    reasoning_prefixes = ()
    response_formats = ("text", "json_object")  # JSON mode only: a json_schema is refused

    def __init__(
        self,
        ranges: Mapping[str, tuple[float, float]] | None = None,
        refused: Mapping[str, str] | None = None,
        handler: Handler = protocol_reply,
    ) -> None:
        super().__init__(handler)
        self.ranges, self.refused_params = dict(ranges or {}), dict(refused or {})

    def check(self, body: Mapping[str, Any]) -> int:
        for param, message in self.refused_params.items():
            if param in body:
                raise self.error(400, "invalid_parameter_error", message, param)
        for param, (low, high) in self.ranges.items():
            if param in body and not low <= float(body[param]) <= high:
                raise self.error(
                    400, "invalid_request_error", f"invalid {param}: must be in [{low:g}, {high:g}]", param
                )
        return 0


class QianfanEmulator(OpenAIEmulator):
    """Baidu Qianfan v2: OpenAI-shaped chat completions under ``/v2`` with Qianfan's error body."""

    base_path = "/v2"
    reasoning_prefixes = ()

    def error(self, status: int, code: str, message: str, param: str | None = None) -> Refusal:
        kind = "invalid_request_error" if status < 500 else "server_error"
        return Refusal(
            status, {"error": {"code": code, "message": message, "type": kind}, "id": f"as-{uuid.uuid4().hex[:10]}"}
        )

    def authorise(self, seen: Seen) -> None:
        if not seen.headers.get("authorization", "").startswith("Bearer "):
            raise self.error(401, "invalid_iam_token", "IAM Certification failed")

    def check(self, body: Mapping[str, Any]) -> int:
        messages = body["messages"]
        if messages[0].get("role") not in ("user", "system") or messages[-1].get("role") != "user":
            raise self.error(
                400, "invalid_argument", "the first message must be user or system and the last message must be user"
            )
        ranges = {"temperature": (0.0, 1.0), "top_p": (0.0, 1.0), "penalty_score": (1.0, 2.0)}
        for param, (low, high) in ranges.items():
            if param in body and not low <= float(body[param]) <= high:
                raise self.error(400, "invalid_argument", f"{param} must be in [{low:g}, {high:g}]", param)
        cap = self.cap(body)
        if cap is not None and cap < 2:
            raise self.error(400, "invalid_argument", "max_completion_tokens must be at least 2")
        return 0

    def completion(self, body: Mapping[str, Any], text: str, hidden: int, truncated: bool) -> dict[str, Any]:
        out = super().completion(body, text, hidden, truncated)
        out["id"] = f"as-{uuid.uuid4().hex[:10]}"
        out["usage"] = {k: out["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
        return out


class AnthropicEmulator(Emulator):
    """The Anthropic Messages API (``POST /v1/messages``) with Claude's documented request rules."""

    one_sampler_prefixes: tuple[str, ...] = ("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5")
    thinking_tokens = 256

    @property
    def base_url(self) -> str:
        """The ``api_base`` litellm's ``anthropic/`` route takes (it appends ``/v1/messages``)."""
        return self.url

    def error(self, status: int, code: str, message: str, param: str | None = None) -> Refusal:
        return Refusal(
            status,
            {
                "type": "error",
                "error": {"type": code, "message": message},
                "request_id": f"req_{uuid.uuid4().hex[:16]}",
            },
        )

    def listing(self, seen: Seen) -> dict[str, Any]:
        if seen.path != "/v1/models":
            raise self.error(404, "not_found_error", f"Not Found: {seen.path}")
        if not seen.headers.get("x-api-key"):
            raise self.error(401, "authentication_error", "x-api-key header is required")
        return {"data": [], "has_more": False, "first_id": None, "last_id": None}

    def answer(self, seen: Seen) -> dict[str, Any]:
        if seen.path != "/v1/messages":
            raise self.error(404, "not_found_error", f"Not Found: {seen.path}")
        if not seen.headers.get("x-api-key"):
            raise self.error(401, "authentication_error", "x-api-key header is required")
        if not seen.headers.get("anthropic-version"):
            raise self.error(400, "invalid_request_error", "anthropic-version: header is required")
        body = seen.body if isinstance(seen.body, dict) else {}
        for field in ("model", "max_tokens", "messages"):
            if field not in body:
                raise self.error(400, "invalid_request_error", f"{field}: Field required")
        thinking = self.check(body)
        schema = self.check_output_format(body, seen.headers)
        text, truncated = cut(self.reply(self.openai_messages(body), schema), int(body["max_tokens"]), thinking)
        return self.message(body, text, thinking, truncated)

    def check_output_format(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> Mapping[str, Any] | None:
        """Structured outputs (beta): ``output_format`` needs the beta header and a schema Claude can compile."""
        value = body.get("output_format")
        if value is None:
            return None
        if "structured-outputs-2025-11-13" not in headers.get("anthropic-beta", ""):
            raise self.error(400, "invalid_request_error", "output_format: Extra inputs are not permitted")
        if (
            not isinstance(value, Mapping)
            or value.get("type") != "json_schema"
            or not isinstance(value.get("schema"), Mapping)
        ):
            raise self.error(400, "invalid_request_error", "output_format: expected {type: json_schema, schema: {...}}")
        problem = anthropic_schema_problem(value["schema"])
        if problem:
            raise self.error(400, "invalid_request_error", f"output_format.schema: {problem}")
        return value["schema"]

    def check(self, body: Mapping[str, Any]) -> int:
        """Refuse what Claude refuses; return the thinking tokens the reply spends."""
        if any(m.get("role") == "system" for m in body["messages"]):
            raise self.error(
                400,
                "invalid_request_error",
                'messages: Unexpected role "system". The Messages API '
                'accepts a top-level `system` parameter, not "system" as an input message role.',
            )
        if "temperature" in body and not 0 <= float(body["temperature"]) <= 1:
            raise self.error(400, "invalid_request_error", "temperature: range: 0..1")
        if str(body["model"]).startswith(self.one_sampler_prefixes) and "temperature" in body and "top_p" in body:
            raise self.error(
                400,
                "invalid_request_error",
                "`temperature` and `top_p` cannot both be specified for this model. Please use only one.",
            )
        thinking = body.get("thinking") or {}
        if thinking.get("type") != "enabled":
            return 0
        budget = int(thinking.get("budget_tokens") or 0)
        if budget < 1024 or budget >= int(body["max_tokens"]):
            raise self.error(
                400, "invalid_request_error", "thinking.enabled.budget_tokens: must be >= 1024 and less than max_tokens"
            )
        if body.get("temperature", 1) != 1 or "top_k" in body:
            raise self.error(
                400,
                "invalid_request_error",
                "`temperature` may only be set to 1 and `top_k` may not be set when thinking is enabled",
            )
        return min(budget, self.thinking_tokens)

    @staticmethod
    def openai_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
        system = body.get("system")
        out = [{"role": "system", "content": _text_of(system)}] if system else []
        return out + [{"role": m["role"], "content": _text_of(m.get("content"))} for m in body["messages"]]

    def message(self, body: Mapping[str, Any], text: str, thinking: int, truncated: bool) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if thinking:
            content.append(
                {
                    "type": "thinking",
                    "thinking": "Let me work through this." * (thinking // 6),
                    # a function of the request, as the reply is: a batched request's content equals the live one's
                    "signature": hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32],
                }
            )
        if text or not thinking:
            content.append({"type": "text", "text": text})
        prompt = tokens("".join(m["content"] for m in self.openai_messages(body)))
        return {
            "id": f"msg_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": "max_tokens" if truncated else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": prompt,
                "output_tokens": tokens(text) + thinking,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "service_tier": "standard",
            },
        }


GENERATION_FIELDS = frozenset(
    name
    for camel in (
        "temperature",
        "topP",
        "topK",
        "candidateCount",
        "maxOutputTokens",
        "stopSequences",
        "seed",
        "presencePenalty",
        "frequencyPenalty",
        "responseMimeType",
        "responseSchema",
        "responseJsonSchema",
        "thinkingConfig",
        "responseModalities",
        "responseLogprobs",
        "logprobs",
        "mediaResolution",
    )
    for name in (camel, re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel))
)
"""``generationConfig`` fields the API knows, in both JSON spellings protobuf accepts."""


class GeminiEmulator(Emulator):
    """The Gemini API's ``generateContent`` with Gemini 2.5 Pro's thinking rules."""

    always_thinking_prefixes: tuple[str, ...] = ("gemini-2.5-pro",)
    thought_tokens = 200  # spent per reply, bounded by the request's thinkingBudget
    _route = re.compile(r"^/v1beta/models/([^/:]+):generateContent$")

    @property
    def base_url(self) -> str:
        """The ``api_base`` litellm's ``gemini/`` route takes (it appends ``/models/{model}:generateContent``)."""
        return self.url + "/v1beta"

    def error(self, status: int, code: str, message: str, param: str | None = None) -> Refusal:
        return Refusal(status, {"error": {"code": status, "message": message, "status": code}})

    def listing(self, seen: Seen) -> dict[str, Any]:
        if seen.path != "/v1beta/models":
            raise self.error(404, "NOT_FOUND", f"path not found: {seen.path}")
        self.authorise(seen)
        return {"models": []}

    def authorise(self, seen: Seen) -> None:
        """An API key goes in ``x-goog-api-key`` or ``?key=``; a Bearer token is taken for OAuth."""
        if seen.headers.get("x-goog-api-key") or seen.query.get("key"):
            return
        if seen.headers.get("authorization", "").startswith("Bearer "):
            raise self.error(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 "
                "access token, login cookie or other valid authentication credential.",
            )
        raise self.error(
            403,
            "PERMISSION_DENIED",
            "Method doesn't allow unregistered callers (callers without "
            "established identity). Please use API Key or other form of API consumer identity to call "
            "this API.",
        )

    def answer(self, seen: Seen) -> dict[str, Any]:
        route = self._route.match(seen.path)
        if route is None:
            raise self.error(404, "NOT_FOUND", f"models path not found: {seen.path}")
        self.authorise(seen)
        body = seen.body if isinstance(seen.body, dict) else {}
        if not body.get("contents"):
            raise self.error(400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified")
        config = body.get("generationConfig") or body.get("generation_config") or {}
        thoughts = self.check(route.group(1), config)
        schema = self.check_response_schema(config)
        cap = config.get("maxOutputTokens", config.get("max_output_tokens"))
        text, truncated = cut(
            self.reply(self.openai_messages(body), schema), None if cap is None else int(cap), thoughts
        )
        return self.generated(route.group(1), body, text, thoughts, truncated)

    def check(self, model: str, config: Mapping[str, Any]) -> int:
        """Refuse what Gemini refuses; return the thought tokens the reply spends."""
        unknown = sorted(set(config) - GENERATION_FIELDS)
        if unknown:
            raise self.error(
                400,
                "INVALID_ARGUMENT",
                f'Invalid JSON payload received. Unknown name "{unknown[0]}" '
                "at 'generation_config': Cannot find field.",
            )
        if "temperature" in config and not 0 <= float(config["temperature"]) <= 2:
            raise self.error(400, "INVALID_ARGUMENT", "temperature must be in [0.0, 2.0]")
        thinking = config.get("thinkingConfig") or config.get("thinking_config") or {}
        budget = thinking.get("thinkingBudget", thinking.get("thinking_budget"))
        if model.startswith(self.always_thinking_prefixes) and budget is not None and budget != -1:
            if budget == 0:
                raise self.error(
                    400, "INVALID_ARGUMENT", "Budget 0 is invalid. This model only works in thinking mode."
                )
            if not 128 <= int(budget) <= 32768:
                raise self.error(400, "INVALID_ARGUMENT", "The thinking budget must be between 128 and 32768.")
        return self.thought_tokens if budget in (None, -1) else min(int(budget), self.thought_tokens)

    def check_response_schema(self, config: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """JSON output: a schema (``responseJsonSchema`` or ``responseSchema``, not both) needs the JSON MIME type."""
        mime = config.get("responseMimeType", config.get("response_mime_type"))
        json_schema = config.get("responseJsonSchema", config.get("response_json_schema"))
        openapi = config.get("responseSchema", config.get("response_schema"))
        if json_schema is not None and openapi is not None:
            raise self.error(400, "INVALID_ARGUMENT", "response_schema and response_json_schema cannot both be set.")
        if (json_schema or openapi) is not None and mime != "application/json":
            raise self.error(
                400, "INVALID_ARGUMENT", "response_mime_type must be application/json when a response schema is set."
            )
        if json_schema is not None:
            return json_schema
        return {"type": "object"} if mime == "application/json" and openapi is None else None

    @staticmethod
    def openai_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
        system = body.get("systemInstruction") or body.get("system_instruction")
        out = [{"role": "system", "content": _parts_text(system)}] if system else []
        roles = {"model": "assistant"}
        return out + [{"role": roles.get(c.get("role"), "user"), "content": _parts_text(c)} for c in body["contents"]]

    def generated(
        self, model: str, body: Mapping[str, Any], text: str, thoughts: int, truncated: bool
    ) -> dict[str, Any]:
        config = body.get("generationConfig") or body.get("generation_config") or {}
        thinking = config.get("thinkingConfig") or config.get("thinking_config") or {}
        parts = (
            [{"text": "**Weighing the request**", "thought": True}]
            if thoughts and (thinking.get("includeThoughts") or thinking.get("include_thoughts"))
            else []
        )
        parts += [{"text": text}] if text else []
        content: dict[str, Any] = {"role": "model", **({"parts": parts} if parts else {})}
        prompt = tokens("".join(m["content"] for m in self.openai_messages(body)))
        usage = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": tokens(text),
            "totalTokenCount": prompt + tokens(text) + thoughts,
        }
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        return {
            "candidates": [{"content": content, "finishReason": "MAX_TOKENS" if truncated else "STOP", "index": 0}],
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": uuid.uuid4().hex[:16],
        }


class LlamaCppEmulator(OpenAIEmulator):
    """llama-cpp-python's server: ``response_format`` is ``text`` or ``json_object`` (+ ``schema``), else 422.

    Its request model (``llama_cpp/server/types.py``) types ``response_format`` as
    ``ChatCompletionRequestResponseFormat``: ``type: Literal["text", "json_object"]``, optional
    ``schema``; pydantic refuses anything else with FastAPI's 422 body. A schema becomes a grammar,
    so the reply follows it.
    """

    reasoning_prefixes = ()

    def authorise(self, seen: Seen) -> None:
        return None  # started without --api_key

    def error(self, status: int, code: str, message: str, param: str | None = None) -> Refusal:
        return Refusal(status, {"detail": [{"type": code, "loc": ["body", param or ""], "msg": message}]})

    def check_response_format(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        value = body.get("response_format")
        if value is None:
            return None
        kind = value.get("type") if isinstance(value, Mapping) else None
        if kind not in ("text", "json_object") or set(value) - {"type", "schema"}:
            raise self.error(422, "literal_error", "Input should be 'text' or 'json_object'", "response_format")
        return value.get("schema") or ({"type": "object"} if kind == "json_object" else None)


_STRICT_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf", "$ref",
        "$defs", "definitions", "description", "title", "pattern", "format", "multipleOf", "maximum",
        "exclusiveMaximum", "minimum", "exclusiveMinimum", "minItems", "maxItems",
    }
)  # fmt: skip
"""Keywords OpenAI's strict mode supports (https://platform.openai.com/docs/guides/structured-outputs)."""


def strict_schema_problem(schema: Mapping[str, Any]) -> str:
    """OpenAI's refusal of a strict schema ("" when it is accepted): an object root, every object closed
    with every property required, only the supported keywords."""
    if schema.get("type") != "object" or "anyOf" in schema:
        return "In context=(), schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{}\"'.".format(
            schema.get("type")
        )
    return _walk(schema, (), _strict_node)


def _strict_node(node: Mapping[str, Any], where: tuple[str, ...]) -> str:
    unknown = sorted(set(node) - _STRICT_KEYWORDS)
    if unknown:
        return f"In context={where}, '{unknown[0]}' is not permitted."
    if node.get("type") == "object":
        if node.get("additionalProperties") is not False:
            return f"In context={where}, 'additionalProperties' is required to be supplied and to be false."
        missing = sorted(set(node.get("properties") or {}) - set(node.get("required") or []))
        if missing:
            return f"In context={where}, 'required' is required to be supplied and to be an array including every key in properties. Missing '{missing[0]}'."
    return ""


def anthropic_schema_problem(schema: Mapping[str, Any]) -> str:
    """Claude's refusal of an ``output_format`` schema ("" when it compiles)."""
    return _walk(schema, (), _anthropic_node)


def _anthropic_node(node: Mapping[str, Any], where: tuple[str, ...]) -> str:
    for keyword in (
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
    ):
        if keyword in node:
            return f"For '{node.get('type')}' type, property '{keyword}' is not supported"
    if node.get("type") == "array" and node.get("minItems", 0) not in (0, 1):
        return "For 'array' type, 'minItems' values other than 0 or 1 are not supported"
    if node.get("type") == "array" and node.get("maxItems", 0) > 1:
        return "For 'array' type, 'maxItems' values above 1 are not supported"
    if node.get("type") == "object" and node.get("additionalProperties") is not False:
        return "For 'object' type, 'additionalProperties' must be explicitly set to false"
    return ""


def _walk(node: Any, where: tuple[str, ...], check: Callable[[Mapping[str, Any], tuple[str, ...]], str]) -> str:
    if not isinstance(node, Mapping):
        return ""
    problem = check(node, where)
    if problem:
        return problem
    children = [(("properties", k), v) for k, v in (node.get("properties") or {}).items()]
    children += [(("items",), node["items"])] if "items" in node else []
    for path, child in children:
        problem = _walk(child, (*where, *path), check)
        if problem:
            return problem
    return ""


def conform(text: str, schema: Mapping[str, Any]) -> str:
    """The deterministic model's reply as constrained decoding under ``schema`` would shape it.

    A reply already valid stays; a bare value becomes the one property of a one-property object
    (``[...]`` -> ``{"questions": [...]}``, ``unknown`` -> ``{"answer": "unknown"}``); the missing
    properties of a sequential turn are filled (``stop: false``, ``question: ""``). A reply that
    cannot be shaped so (``ok`` to the pre-flight's probe) becomes the schema's smallest instance:
    a grammar lets nothing else out.
    """
    try:
        data: Any = json.loads(text)
    except ValueError:
        data = text
    if _valid(data, schema):
        return text
    props = schema.get("properties") or {}
    shaped: Any = None
    if isinstance(data, Mapping) and set(data) <= set(props):
        shaped = {k: data.get(k, False if p.get("type") == "boolean" else "") for k, p in props.items()}
    elif len(props) == 1:
        shaped = {next(iter(props)): data}
    elif schema.get("type") == "object" and not props:  # JSON mode: a bare value comes back inside an object
        shaped = {"result": data}
    return json.dumps(shaped if _valid(shaped, schema) else smallest(schema), ensure_ascii=False)


def smallest(schema: Mapping[str, Any]) -> Any:
    """The smallest instance of ``schema`` (first enum value, empty strings, ``minItems`` items)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {k: smallest(p) for k, p in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [smallest(schema.get("items") or {}) for _ in range(int(schema.get("minItems", 0)))]
    return {"string": "", "boolean": False, "integer": 0, "number": 0}.get(str(kind))


def _valid(data: Any, schema: Mapping[str, Any]) -> bool:
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError:
        return False
    return True


def _text_of(content: Any) -> str:
    """Anthropic content (a string or text blocks) as plain text."""
    if isinstance(content, str):
        return content
    return "".join(str(b.get("text", "")) for b in content or [] if isinstance(b, dict))


def _parts_text(content: Any) -> str:
    return "".join(str(p.get("text", "")) for p in (content or {}).get("parts") or [] if isinstance(p, dict))


def _handler_class(emulator: Emulator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._serve("GET", None)

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = None
            self._serve("POST", body, raw)

        def do_DELETE(self) -> None:
            self._serve("DELETE", None)

        def _serve(self, method: str, body: Any, raw: bytes = b"") -> None:
            parts = urlsplit(self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, out = emulator.serve(Seen(method, parts.path, parse_qs(parts.query), headers, body, raw))
            if isinstance(out, RawBody):
                data, kind = out.data, out.content_type
            else:
                data, kind = json.dumps(out, ensure_ascii=False).encode(), "application/json"
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler
