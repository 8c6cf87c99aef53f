"""Shared by several test modules (moved out of test_providers.py: no test module imports another)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import pytest

Response = tuple[Any, ...]
"""(status, content type, body) or (status, content type, body, extra headers)."""


@dataclass(frozen=True)
class Seen:
    """One request the fake server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class FakeHTTP:
    """A threaded HTTP server on 127.0.0.1 answering from ``routes[(method, path)]``.

    A route is a fixed :data:`Response` or a callable ``(Seen) -> Response``;
    unknown routes get 404. Every request is recorded in ``seen``.
    """

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Response | Callable[[Seen], Response]] = {}
        self.seen: list[Seen] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def route(self, method: str, path: str, response: Response | Callable[[Seen], Response]) -> str:
        self.routes[(method, path)] = response
        return self.url + path

    def answer(self, seen: Seen) -> Response:
        self.seen.append(seen)
        route = self.routes.get((seen.method, seen.path))
        if route is None:
            return 404, "text/plain", "not found"
        return route(seen) if callable(route) else route

    def __enter__(self) -> Self:
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _handler(server: FakeHTTP) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the search APIs and web servers the fetchers meet

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen = Seen(self.command, parts.path, parse_qs(parts.query), dict(self.headers.items()), body)
            status, kind, payload, *extra = server.answer(seen)
            data = payload.encode("utf-8") if isinstance(payload, str) else payload
            self.send_response(status)
            self.send_header("Content-Type", kind)
            for name, value in (extra[0] if extra else {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

    return Handler


@pytest.fixture
def fake_http() -> Iterator[FakeHTTP]:
    with FakeHTTP() as server:
        yield server


ARTICLE = (
    "<html><head><title>Paris travel notes</title></head><body>"
    "<nav><a href='/'>Home</a> <a href='/x'>Menu item</a></nav>"
    "<article><h1>Paris</h1>"
    + "<p>Paris is the capital and largest city of France, on the river Seine.</p>"
    * 3
    + "<p>巴黎是法国的首都和最大城市，位于塞纳河畔。</p></article>"
    "<footer>Copyright footer boilerplate 2024</footer></body></html>"
)
