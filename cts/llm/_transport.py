"""How one request is sent: litellm, or plain HTTP to an OpenAI-compatible server (``transport: openai``, the default).

litellm costs about 6-8 ms of CPU per call on this stack (logging objects,
pydantic validation, cost lookups), which caps one process near 150 calls/s.
For OpenAI-compatible endpoints (``openai/`` ids with an ``api_base``: vLLM,
sglang, the test server) ``transport: openai`` posts the chat-completions JSON
with one aiohttp session per endpoint and event loop, its connections kept alive:
a fraction of the CPU, and no SDK import (the openai package takes over a second
to import, which would stall a sweep's shared event loop before its first request).
Hosted APIs always go through litellm, which translates their request formats.

Why aiohttp and not httpx (which this module used before): httpcore's pool looks at
every pooled connection on each request (``has_expired``, a ``select`` per connection),
so with the 64 connections a sweep keeps alive its CPU per request grew with the pool:
measured 0.5-1 ms more per request at 64 connections, against a flat cost for aiohttp's
connector (one idle-connection list per host). aiohttp is what litellm itself sends with,
so it adds no dependency.

Failures keep the shapes :func:`cts.llm._retry.classify` reads: aiohttp's timeout
(``TimeoutError``) and connection errors (``ClientConnectorError``, ``ServerDisconnectedError``,
``ClientOSError``), and :class:`HTTPStatusError` (``status_code``, ``response.headers`` for
Retry-After) for a non-2xx answer.
"""

from __future__ import annotations

import asyncio
import json
import re
import weakref
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any, Literal

from cts._util.jsonfast import request_body
from cts.core.contracts import Route
from cts.llm._lite import litellm_module

Transport = Literal["litellm", "openai"]
TRANSPORTS: tuple[Transport, ...] = ("litellm", "openai")
_THINK_LEAD = re.compile(r"^\s*<think>(.*?)</think>", re.DOTALL)


def openai_compatible(model: str, api_base: str | None) -> bool:
    """Whether the route is a plain OpenAI-compatible endpoint."""
    return bool(api_base) and model.startswith("openai/")


class Sender:
    """Sends chat requests with the configured transport (clients cached per event loop)."""

    def __init__(self, transport: Transport) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"services.llm.transport must be one of {TRANSPORTS}, got {transport!r}")
        self.transport = transport
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, Any]]
        self._clients = weakref.WeakKeyDictionary()
        self._closers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncIterator[None]]
        self._closers = weakref.WeakKeyDictionary()

    async def send(
        self,
        route: Route,
        messages: list[dict[str, str]],
        timeout: float,
        prices: tuple[float, float],
        params: dict[str, Any],
        on_body: Callable[[dict[str, Any]], None] | None = None,
    ) -> Any:
        """One request without retries; returns an OpenAI-style response object.

        Args:
            route: Where the request goes (its model id, ``api_base`` and key).
            on_body: Called with the request body as the provider receives it (the request audit):
                the JSON posted, or the body litellm built for the provider's API.
        """
        model, api_base, api_key = route.model, route.api_base, route.api_key
        if self.transport == "openai" and openai_compatible(model, api_base):
            import aiohttp

            session, url = await self._client(api_base or "", api_key or "")
            payload = {"model": model.split("/", 1)[1], "messages": messages, **params}
            if on_body is not None:
                on_body(payload)
            async with session.post(
                url, data=request_body(payload), timeout=aiohttp.ClientTimeout(total=timeout), headers=_JSON
            ) as raw:
                content = await raw.read()
                if raw.status >= 400:
                    raise HTTPStatusError(raw.status, raw.headers, content.decode("utf-8", errors="replace"))
            return _split_think(_response(content))
        return await litellm_module().acompletion(
            model=model,
            messages=messages,
            api_base=api_base,
            api_key=api_key,
            timeout=timeout,
            num_retries=0,
            max_retries=0,
            # per-call prices spare litellm a price-table search (~1 ms CPU per call)
            input_cost_per_token=prices[0],
            output_cost_per_token=prices[1],
            **({"logger_fn": _provider_body(on_body)} if on_body is not None else {}),
            **params,
        )

    async def _client(self, api_base: str, api_key: str) -> tuple[Any, str]:
        """This loop's session for the endpoint, and the endpoint's chat-completions URL."""
        import aiohttp

        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            clients: dict[tuple, Any] = {}
            closer = _close_at_loop_end(clients)
            await closer.__anext__()  # now the loop finalises it in shutdown_asyncgens()
            self._clients[loop] = clients
            self._closers[loop] = closer
        per_loop = self._clients[loop]
        if (api_base, api_key) not in per_loop:
            headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
            # No cap here: the endpoint limiters (cts.llm._adaptive) bound the calls in flight,
            # and every connection they open stays alive for the next call.
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=_KEEPALIVE_S)
            session = aiohttp.ClientSession(headers=headers, connector=connector, auto_decompress=True)
            per_loop[api_base, api_key] = (session, api_base.rstrip("/") + "/chat/completions")
        return per_loop[api_base, api_key]


_JSON = {"Content-Type": "application/json"}
_KEEPALIVE_S = 30.0
"""Seconds an idle connection stays pooled (hosted APIs close theirs after about a minute)."""


def _provider_body(on_body: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """litellm's ``logger_fn``: hands on the body of its first log event that carries one (the pre-call's)."""
    seen: list[bool] = []

    def log(details: dict[str, Any]) -> None:
        body = (details.get("additional_args") or {}).get("complete_input_dict")
        if isinstance(body, dict) and not seen:
            seen.append(True)
            on_body(body)

    return log


class HTTPStatusError(Exception):
    """A non-2xx answer of an OpenAI-compatible endpoint (its status, headers and body).

    Attributes:
        status_code: The HTTP status.
        response: Has ``headers`` (``Retry-After`` is read from them).
    """

    def __init__(self, status_code: int, headers: Any, body: str) -> None:
        super().__init__(f"HTTP {status_code}: {body[:300]}")
        self.status_code = status_code
        self.response = SimpleNamespace(headers=headers, status_code=status_code)


async def _close_at_loop_end(clients: dict[tuple, Any]) -> AsyncIterator[None]:
    """Close a loop's HTTP clients while it can still run them (``asyncio.run`` ends with
    ``shutdown_asyncgens``); otherwise they are closed by the garbage collector on a dead loop."""
    try:
        yield
    finally:
        for session, _ in clients.values():
            await session.close()


def _response(content: bytes) -> Any:
    """A chat-completion JSON body as attribute-access objects (what the runtime reads).

    An unparsable body raises ``json.JSONDecodeError``, which the retry policy treats as
    a transient server fault, as with litellm.
    """
    return json.loads(content, object_hook=lambda d: SimpleNamespace(**d))


def _split_think(response: Any) -> Any:
    """Move a leading ``<think>`` block to ``reasoning_content``, as litellm does."""
    for choice in getattr(response, "choices", None) or []:
        message = choice.message
        match = _THINK_LEAD.match(message.content or "")
        if match and not getattr(message, "reasoning_content", None):
            message.reasoning_content = match.group(1)
            message.content = message.content[match.end() :]
    return response
