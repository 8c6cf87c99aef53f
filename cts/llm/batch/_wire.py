"""The two Batch API wire formats: OpenAI's (files + batches, through litellm) and Anthropic's Message Batches.

OpenAI (and OpenAI-compatible servers that implement it): the requests are a JSONL file
uploaded with ``purpose=batch``, a batch is created on it with a 24 h completion window,
polled with ``GET /v1/batches/{id}``, and its results are the output file (one line per
request that ran, with its HTTP status and body) and the error file (expired lines, lines
that failed); every request of one batch names the same model
(https://platform.openai.com/docs/guides/batch). litellm's ``acreate_file``,
``acreate_batch``, ``aretrieve_batch``, ``afile_content`` and ``alist_batches`` send these.

Anthropic (https://docs.claude.com/en/docs/build-with-claude/batch-processing): litellm 1.x
retrieves Message Batches but cannot create them, so this module posts
``/v1/messages/batches`` itself with aiohttp. Each request's ``params`` is the Messages
body litellm's own Anthropic transformation builds for the live call (same system
blocks, ``output_format``, caps), and each result is turned back into an OpenAI-shaped
response by the same transformation, so a batched call yields what the live one would.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cts.llm._lite import litellm_module
from cts.llm._transport import HTTPStatusError, _response, _split_think
from cts.llm.batch._ledger import Route

ANTHROPIC_BASE = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class Status:
    """A batch's state at the provider."""

    ended: bool
    status: str
    counts: Mapping[str, int] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """One request's result in an ended batch: a response, or why there is none.

    Attributes:
        response: The OpenAI-shaped response (what the live transport returns), or None.
        retry: Whether sending the request again may succeed (expired, cancelled, 408, 429, 5xx).
        error: An exception the caller gets when the request is not sent again.
    """

    response: Any = None
    retry: bool = False
    error: Exception | None = None


class Wire(Protocol):
    """What the broker needs of a Batch API."""

    def body(self, route: Route, messages: list[dict[str, Any]], params: Mapping[str, Any]) -> tuple[dict, Route]:
        """The request body as the provider's batch line takes it, and the route it groups under."""

    async def submit(
        self, route: Route, key: str | None, local_id: str, lines: list[tuple[str, dict]], window: str
    ) -> str:
        """Submit a batch with its completion ``window``; its provider id."""

    async def status(self, route: Route, key: str | None, batch_id: str) -> Status:
        """The batch's state."""

    async def results(self, route: Route, key: str | None, status: Status) -> dict[str, Outcome]:
        """The outcome of each request of an ended batch, by custom id."""

    async def find(self, route: Route, key: str | None, local_id: str) -> str | None:
        """The id of a batch submitted under ``local_id`` whose id was not recorded, or None."""


class OpenAIWire:
    """OpenAI's Batch API through litellm (OpenAI itself, or an OpenAI-compatible ``api_base``)."""

    endpoint = "/v1/chat/completions"

    def body(self, route: Route, messages: list[dict[str, Any]], params: Mapping[str, Any]) -> tuple[dict, Route]:
        """The chat-completions body the ``openai`` transport posts live."""
        return {"model": route.model.split("/", 1)[-1], "messages": messages, **params}, route

    def _where(self, route: Route, key: str | None) -> dict[str, Any]:
        # max_retries 0: the SDK would retry a create on its own (a duplicate batch); the broker retries,
        # and a lost create is found again by its metadata
        where: dict[str, Any] = {
            "custom_llm_provider": "openai",
            "api_key": key or "sk-no-key-needed",
            "max_retries": 0,
        }
        if route.api_base:
            where["api_base"] = route.api_base
        return where

    async def submit(
        self, route: Route, key: str | None, local_id: str, lines: list[tuple[str, dict]], window: str
    ) -> str:
        """Upload the JSONL and create the batch, its ``metadata`` naming ``local_id``."""
        litellm = litellm_module()
        jsonl = "".join(
            json.dumps({"custom_id": cid, "method": "POST", "url": self.endpoint, "body": body}, ensure_ascii=False)
            + "\n"
            for cid, body in lines
        ).encode()
        where = self._where(route, key)
        upload = await litellm.acreate_file(
            file=(f"cts-{local_id}.jsonl", io.BytesIO(jsonl), "application/jsonl"), purpose="batch", **where
        )
        batch = await litellm.acreate_batch(
            completion_window=window,
            endpoint=self.endpoint,
            input_file_id=upload.id,
            metadata={"cts_batch": local_id},
            **where,
        )
        return str(batch.id)

    async def status(self, route: Route, key: str | None, batch_id: str) -> Status:
        """``GET /v1/batches/{id}``: ended once completed, expired, cancelled or failed."""
        batch = await litellm_module().aretrieve_batch(
            batch_id=batch_id,
            # else litellm's success logging downloads the result files again to price the batch
            litellm_metadata={"batch_ignore_default_logging": True},
            **self._where(route, key),
        )
        raw = batch.model_dump() if hasattr(batch, "model_dump") else dict(batch)
        counts = raw.get("request_counts") or {}
        ended = raw.get("status") in ("completed", "expired", "cancelled", "failed")
        return Status(ended, str(raw.get("status")), {k: int(v or 0) for k, v in dict(counts).items()}, raw)

    async def results(self, route: Route, key: str | None, status: Status) -> dict[str, Outcome]:
        """The output file's lines (replies) and the error file's (expired, failed)."""
        outcomes: dict[str, Outcome] = {}
        for which in ("error_file_id", "output_file_id"):  # a reply wins over an error of the same id
            file_id = status.raw.get(which)
            if not file_id:
                continue
            content = await litellm_module().afile_content(file_id=file_id, **self._where(route, key))
            for line in _jsonl(content.content):
                outcomes[str(line.get("custom_id"))] = _openai_outcome(line)
        return outcomes

    async def find(self, route: Route, key: str | None, local_id: str) -> str | None:
        """Look ``local_id`` up in the recent batches' ``metadata`` (newest 100)."""
        listed = await litellm_module().alist_batches(limit=100, **self._where(route, key))
        data = getattr(listed, "data", None) or (listed.get("data") if isinstance(listed, Mapping) else []) or []
        for batch in data:
            raw = batch.model_dump() if hasattr(batch, "model_dump") else dict(batch)
            if (raw.get("metadata") or {}).get("cts_batch") == local_id:
                return str(raw["id"])
        return None


def _openai_outcome(line: Mapping[str, Any]) -> Outcome:
    response = line.get("response") or {}
    status = int(response.get("status_code") or 0)
    if status == 200 and isinstance(response.get("body"), Mapping):
        return Outcome(_split_think(_response(json.dumps(response["body"]).encode())))
    error = line.get("error") or {}
    if error.get("code") in ("batch_expired", "batch_cancelled"):
        return Outcome(retry=True, error=RuntimeError(f"{error.get('code')}: {error.get('message', '')}"))
    body = response.get("body") or error
    return _http_outcome(status or 500, json.dumps(body, ensure_ascii=False))


def _http_outcome(status: int, body: str) -> Outcome:
    """A line that failed with an HTTP status: 408, 429 and 5xx may pass when sent again, other 4xx will not."""
    return Outcome(retry=status in (408, 429) or status >= 500, error=HTTPStatusError(status, {}, body))


def _jsonl(data: bytes | str) -> list[dict[str, Any]]:
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    return [json.loads(line) for line in text.splitlines() if line.strip()]


_ANTHROPIC_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status of an errored result's error type (https://docs.anthropic.com/en/api/errors); others: 500."""


class AnthropicWire:
    """Anthropic's Message Batches, posted with aiohttp; bodies and replies through litellm's transformation."""

    def body(self, route: Route, messages: list[dict[str, Any]], params: Mapping[str, Any]) -> tuple[dict, Route]:
        """litellm's Messages body for the live call; its beta headers join the route (one batch, one header set)."""
        from litellm.llms.anthropic.chat.transformation import AnthropicConfig

        litellm_module()
        config = AnthropicConfig()
        model = route.model.split("/", 1)[-1]
        optional = config.map_openai_params(
            non_default_params=dict(params), optional_params={}, model=model, drop_params=False
        )
        optional.pop("json_mode", None)  # litellm's handler takes it out before the body is built
        headers: dict[str, str] = {}
        body = config.transform_request(
            model=model, messages=messages, optional_params=optional, litellm_params={}, headers=headers
        )
        beta = tuple(sorted((k.lower(), v) for k, v in headers.items() if k.lower() == "anthropic-beta"))
        return dict(body), Route(route.api, route.api_base, route.model, beta, route.price_in, route.price_out)

    def _headers(self, route: Route, key: str | None) -> dict[str, str]:
        return {"x-api-key": key or "", "anthropic-version": ANTHROPIC_VERSION, **dict(route.headers)}

    def _base(self, route: Route) -> str:
        return (route.api_base or ANTHROPIC_BASE).rstrip("/")

    async def _call(self, method: str, url: str, headers: Mapping[str, str], payload: Any = None) -> bytes:
        import aiohttp

        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
            session.request(method, url, json=payload, headers=dict(headers)) as raw,
        ):
            content = await raw.read()
            if raw.status >= 400:
                raise HTTPStatusError(raw.status, raw.headers, content.decode("utf-8", errors="replace"))
            return content

    async def submit(
        self, route: Route, key: str | None, local_id: str, lines: list[tuple[str, dict]], window: str
    ) -> str:
        """``POST /v1/messages/batches`` (Anthropic's window is always 24 h: ``window`` is not sent)."""
        payload = {"requests": [{"custom_id": cid, "params": body} for cid, body in lines]}
        content = await self._call(
            "POST", f"{self._base(route)}/v1/messages/batches", self._headers(route, key), payload
        )
        return str(json.loads(content)["id"])

    async def status(self, route: Route, key: str | None, batch_id: str) -> Status:
        """``GET /v1/messages/batches/{id}``: ended once ``processing_status`` is ``ended``."""
        url = f"{self._base(route)}/v1/messages/batches/{batch_id}"
        raw = json.loads(await self._call("GET", url, self._headers(route, key)))
        counts = {k: int(v or 0) for k, v in (raw.get("request_counts") or {}).items()}
        return Status(raw.get("processing_status") == "ended", str(raw.get("processing_status")), counts, raw)

    async def results(self, route: Route, key: str | None, status: Status) -> dict[str, Outcome]:
        """The ``results_url`` JSONL: succeeded lines become OpenAI-shaped responses."""
        url = status.raw.get("results_url") or f"{self._base(route)}/v1/messages/batches/{status.raw['id']}/results"
        lines = _jsonl(await self._call("GET", str(url), self._headers(route, key)))
        return {str(line.get("custom_id")): self._outcome(route, line.get("result") or {}) for line in lines}

    def _outcome(self, route: Route, result: Mapping[str, Any]) -> Outcome:
        kind = result.get("type")
        if kind == "succeeded":
            return Outcome(_openai_shaped(route, result["message"]))
        if kind in ("expired", "canceled"):
            return Outcome(retry=True, error=RuntimeError(f"batch_{kind}"))
        error = result.get("error") or {}
        inner = (error.get("error") or error) if isinstance(error, Mapping) else {}
        status = _ANTHROPIC_STATUS.get(str(inner.get("type")), 500)
        return _http_outcome(status, json.dumps(error, ensure_ascii=False))

    async def find(self, route: Route, key: str | None, local_id: str) -> str | None:
        """Anthropic's batches carry no metadata: an unrecorded submission cannot be found (None)."""
        return None


def _openai_shaped(route: Route, message: Mapping[str, Any]) -> Any:
    """An Anthropic Message as litellm's live call returns it (text, thinking, usage, finish reason)."""
    import httpx
    from litellm import ModelResponse
    from litellm.llms.anthropic.chat.transformation import AnthropicConfig

    raw = httpx.Response(200, json=dict(message))
    json_mode = any(k == "anthropic-beta" and "structured-outputs" in v for k, v in route.headers)
    return AnthropicConfig().transform_parsed_response(
        completion_response=dict(message), raw_response=raw, model_response=ModelResponse(), json_mode=json_mode
    )


WIRES: dict[str, Wire] = {"openai": OpenAIWire(), "anthropic": AnthropicWire()}
"""The Batch API of each ``batch.api`` value."""
