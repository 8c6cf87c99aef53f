"""A scriptable OpenAI-compatible chat-completions server for tests and benchmarks.

Stdlib only (``ThreadingHTTPServer``, ``TCP_NODELAY``), bound to 127.0.0.1 on an
ephemeral port. Point any OpenAI-compatible client at ``server.base_url``
(ends in ``/v1``); ``POST /v1/chat/completions`` answers from, in order:

1. the queue filled by ``server.script(reply, ...)`` (one reply per request, FIFO);
2. ``server.handler(request_json) -> reply`` when the queue is empty;
3. ``server.default`` (a reply; ``"ok"`` unless changed).

A reply is a ``str`` (the assistant message content) or a :class:`Reply`, which
can also inject an HTTP status (``Reply.error(429, retry_after=1)``), a delay
before answering (``Reply("late", delay_s=2)`` to provoke client timeouts), a
raw body (``Reply(raw='{"choices": [')`` for broken JSON) and token counts.
Every reply carries ``usage`` (prompt/completion tokens; approximated from the
text lengths unless given).

``GET /v1/models`` (the pre-flight probe) answers ``server.models_status`` with the ids in
``server.models`` (empty: lists nothing, so any model name is accepted); each GET path is
appended to ``server.gets``, not to ``server.requests``.

Connections stay open between requests (HTTP/1.1 keep-alive), as every hosted provider
keeps them; ``ScriptedServer(keep_alive=False)`` answers as HTTP/1.0 and closes each
connection after its reply (a server behind a proxy that does not pool).

A hard concurrency cap (``ScriptedServer(max_in_flight=C)``) makes the server answer
429 at once to a request arriving while C others are being served, like a
rate-limited provider; ``server.rejected`` counts those 429s and
``server.peak_in_flight`` the most requests it served at once.

A periodic rate limit (``ScriptedServer(rate_limit_every=N, retry_after=R)``) answers
429 (with ``Retry-After: R`` when given) to every Nth chat request it receives, counted
in arrival order over all clients, like a provider whose quota refills in steps; those
429s are counted in ``server.rejected`` too. No refused request is recorded in
``server.requests``; each is appended to ``server.refused`` instead (with ``record``).

``server.hold(after=n)`` answers the next ``n`` chat requests and leaves the later ones
unanswered until ``server.release()`` (or the server stops): a test that signals a job
mid-run holds it there, so no load on the machine can let the job finish first.

Every request is recorded in ``server.requests`` (list of :class:`Recorded`:
``.body`` parsed JSON, ``.time`` monotonic arrival time, ``.path``, ``.headers`` with lower-cased names);
``server.bodies()`` returns just the parsed bodies and ``server.reset()`` clears
queue, handler and records.

Example::

    with ScriptedServer() as server:
        server.script(Reply.error(429, retry_after=0), '["Which year?"]')
        ...  # call the model at server.base_url
        assert len(server.requests) == 2

:func:`protocol_reply` is a ready-made handler that plays a deterministic
model giving valid replies to prompts A-E (questions, ``unknown``, the original
query, lexical coverage labels, grounded nuggets): ``server.handler = protocol_reply``
lets a whole clarify-then-search job run against the server.

Run standalone (for a benchmark or a manual end-to-end run in a separate process)::

    python tests/llm_fakes.py --latency-ms 200 --protocol   # prints the base url, serves until killed
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Recorded", "Reply", "ReplyLike", "ScriptedServer", "approx_reply_tokens", "protocol_reply", "sweep_reply"]


@dataclass(frozen=True)
class Reply:
    """One scripted response.

    Attributes:
        content: Assistant message text (used when ``status`` is 200 and ``raw`` is None).
        status: HTTP status code to return.
        headers: Extra response headers (e.g. ``{"Retry-After": "1"}``).
        delay_s: Seconds to wait before answering.
        raw: Exact response body to send instead of a generated one.
        tokens_in: ``usage.prompt_tokens`` (default: approximated from the request).
        tokens_out: ``usage.completion_tokens`` (default: approximated from ``content``).
        finish_reason: ``choices[0].finish_reason``.
    """

    content: str = ""
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    finish_reason: str = "stop"

    @classmethod
    def error(cls, status: int, message: str = "scripted error", retry_after: float | None = None) -> Reply:
        """An OpenAI-style error body with ``status`` (and a Retry-After header if given)."""
        headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
        body = json.dumps({"error": {"message": message, "type": "scripted", "code": status}})
        return cls(status=status, headers=headers, raw=body)


ReplyLike = str | Reply


@dataclass(frozen=True)
class Recorded:
    """One request the server received."""

    path: str
    body: Any
    """Parsed JSON body (None when it was not JSON)."""
    time: float
    """``time.monotonic()`` at arrival."""
    headers: Mapping[str, str]
    """Request headers, names lower-cased."""


def approx_reply_tokens(text: str) -> int:
    """A deterministic token estimate (about 4 characters per token, at least 1)."""
    return max(1, len(text) // 4)


class ScriptedServer:
    """OpenAI-compatible chat server on 127.0.0.1 (see the module docstring).

    Args:
        latency_s: Delay added to every reply (on top of a reply's own ``delay_s``).
        record: Keep every request in :attr:`requests` (turn off for long-running servers).
        max_in_flight: Answer 429 to a request arriving while this many are served (None = no cap).
        retry_after: Retry-After (seconds) sent with those 429s (None = no header).
        rate_limit_every: Answer 429 to every Nth chat request (None = never).
        keep_alive: Keep connections open between requests (HTTP/1.1); False answers as HTTP/1.0
            and closes each connection after its reply.
    """

    def __init__(
        self,
        latency_s: float = 0.0,
        record: bool = True,
        max_in_flight: int | None = None,
        retry_after: float | None = None,
        rate_limit_every: int | None = None,
        keep_alive: bool = True,
    ) -> None:
        self.latency_s = latency_s
        self.keep_alive = keep_alive
        self.record = record
        self.max_in_flight = max_in_flight
        self.retry_after = retry_after
        self.rate_limit_every = rate_limit_every
        self.arrived = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.served = 0
        self.rejected = 0
        self.handler: Callable[[Any], ReplyLike] | None = None
        self.default: ReplyLike = "ok"
        self.requests: list[Recorded] = []
        self.refused: list[Recorded] = []
        self.models: list[str] = []
        self.models_status = 200
        self.gets: list[str] = []
        self._queue: collections.deque[ReplyLike] = collections.deque()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()
        self._posts = 0
        self._hold_from: int | None = None
        self._httpd = _Server(("127.0.0.1", 0), _make_handler(self))
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def script(self, *replies: ReplyLike) -> None:
        """Queue replies, served one per request in order."""
        with self._lock:
            self._queue.extend(replies)

    def bodies(self) -> list[Any]:
        """Parsed JSON bodies of all recorded requests."""
        with self._lock:
            return [r.body for r in self.requests]

    def reset(self) -> None:
        """Forget queued replies, the handler and recorded requests."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.refused.clear()
            self.gets.clear()
        self.handler = None
        self.default = "ok"

    def hold(self, after: int = 0) -> None:
        """Answer the next ``after`` chat requests, then leave the later ones unanswered until :meth:`release`."""
        with self._lock:
            self._released.clear()
            self._hold_from = self._posts + after

    def release(self) -> None:
        """Answer the held requests (after their latency) and those to come."""
        with self._lock:
            self._hold_from = None
            self._released.set()

    def _wait_if_held(self) -> None:
        with self._lock:
            self._posts += 1
            held = self._hold_from is not None and self._posts > self._hold_from
        if held:
            self._released.wait()

    def start(self) -> ScriptedServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedServer:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _admit(self) -> bool:
        """Count one request in flight, or refuse it (429): above ``max_in_flight``, or the Nth arrival."""
        with self._lock:
            self.arrived += 1
            periodic = self.rate_limit_every is not None and self.arrived % self.rate_limit_every == 0
            if periodic or (self.max_in_flight is not None and self.in_flight >= self.max_in_flight):
                self.rejected += 1
                return False
            self.in_flight += 1
            self.served += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            return True

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _record_and_pick(self, rec: Recorded) -> Reply:
        with self._lock:
            if self.record:
                self.requests.append(rec)
            picked = self._queue.popleft() if self._queue else None
        if picked is None:
            picked = self.handler(rec.body) if self.handler is not None else self.default
        return Reply(content=picked) if isinstance(picked, str) else picked


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # the default backlog of 5 drops connections under concurrent load


def _completion_body(reply: Reply, request: Any) -> str:
    messages = request.get("messages", []) if isinstance(request, dict) else []
    prompt_text = "".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    tokens_in = reply.tokens_in if reply.tokens_in is not None else approx_reply_tokens(prompt_text)
    tokens_out = reply.tokens_out if reply.tokens_out is not None else approx_reply_tokens(reply.content)
    body = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "scripted") if isinstance(request, dict) else "scripted",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content},
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": tokens_in,
            "completion_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out,
        },
    }
    return json.dumps(body, ensure_ascii=False)


def _make_handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if server.keep_alive else "HTTP/1.0"  # 1.1: clients reuse connections

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

        def do_GET(self) -> None:
            server.gets.append(self.path)
            data = [{"id": m, "object": "model"} for m in server.models]
            self._send(server.models_status, json.dumps({"object": "list", "data": data}))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode("utf-8", errors="replace")
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = None
            headers = {name.lower(): value for name, value in self.headers.items()}
            if not server._admit():
                if server.record:
                    with server._lock:
                        server.refused.append(Recorded(self.path, body, time.monotonic(), headers))
                busy = Reply.error(429, "too many requests in flight", server.retry_after)
                self._send(busy.status, busy.raw or "", busy.headers)
                return
            try:
                rec = Recorded(self.path, body, time.monotonic(), headers)
                server._wait_if_held()
                reply = server._record_and_pick(rec)
                delay = server.latency_s + reply.delay_s
                if delay > 0:
                    time.sleep(delay)
                text = reply.raw if reply.raw is not None else _completion_body(reply, body or {})
            finally:
                server._leave()  # before the reply goes out: the client may send the next at once
            self._send(reply.status, text, reply.headers)

        def _send(self, status: int, text: str, headers: Mapping[str, str] = {}) -> None:
            data = text.encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (e.g. its timeout fired)

    return Handler


_QUESTIONS = (
    "Which time period do you mean?",
    "Which specific entity or scope do you mean?",
    "By which definition or criterion?",
    "Which region do you mean?",
)


def protocol_reply(body: Any) -> str:
    """A deterministic fake model giving valid replies to the protocol's prompts A-E.

    It recognises each prompt by the labelled lines of its user message (see
    ``prompts/*.md``): ``Number of questions:`` (A), ``Clarification question:``
    (B, always ``unknown``), ``Clarification questions and answers:`` (C, the
    original query), ``Evidence snippets:`` (D, one nugget per snippet, up to 3)
    and ``Nuggets:`` (E, lexical overlap labels). A WebDancer episode (the user
    prompt lists ``<tools>``) searches the question, visits the first hit and
    answers with what the visit returned; the visit summariser (``User Goal``)
    returns the page's first 600 characters as evidence. Anything else gets ``ok``.
    """
    messages = body.get("messages", []) if isinstance(body, dict) else []
    user = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
    if "<tools>" in user:
        return _webdancer_turn(user, messages)
    if "User Goal" in user:
        page = user.split("User Goal", 1)[0].split("Web Page Content", 1)[-1].strip("*# \n")
        return json.dumps({"rational": "first paragraph", "evidence": page[:600], "summary": page[:300]})
    if m := re.search(r"^Number of questions:\s*(\d+)", user, re.MULTILINE):
        k = int(m.group(1))
        return json.dumps([_QUESTIONS[i % 4] + ("" if i < 4 else f" ({i})") for i in range(k)])
    if "Clarification question:" in user:
        return "unknown"
    if "Clarification questions and answers:" in user:
        m = re.search(r"^Original query:\s*(.+)$", user, re.MULTILINE)
        return m.group(1).strip() if m else "query"
    if "Evidence snippets:" in user:
        return _fake_gold(user)
    if "Nuggets:" in user:
        return _fake_labels(user)
    return "ok"


def sweep_reply(body: Any) -> str:
    """:func:`protocol_reply`, except that the rewriter changes the query (so the system arm searches).

    The rewrite depends on the number of Q&A pairs, hence on k but not on the
    clarifier (the fake clarifiers ask the same questions): jobs share UA
    questions, rewrites and system arms the way real sweeps share some.
    """
    messages = body.get("messages", []) if isinstance(body, dict) else []
    user = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
    if "Clarification questions and answers:" in user and "<tools>" not in user:
        original = re.search(r"^Original query:\s*(.+)$", user, re.MULTILINE)
        pairs = user.split("Clarification questions and answers:", 1)[1].count("?")
        return f"{original.group(1).strip() if original else 'query'} (clarified x{pairs})"
    return protocol_reply(body)


def distinct_sweep_reply(body: Any) -> str:
    """:func:`sweep_reply`, except that each clarifier model asks its own questions, as real models do.

    The questions name a digest of the model, and the rewrite a digest of the Q&A pairs, so no
    two clarifiers' jobs share a UA question, a rewrite or a system arm; only the orig arm (the
    blurred query's own search and judge) is shared, once per instance, as in a real sweep.
    """
    messages = body.get("messages", []) if isinstance(body, dict) else []
    user = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
    if re.search(r"^Number of questions:", user, re.MULTILINE) and "<tools>" not in user:
        tag = hashlib.sha256(str(body.get("model", "")).encode()).hexdigest()[:6]
        return json.dumps([f"{q.rstrip('?')} ({tag})?" for q in json.loads(protocol_reply(body))])
    if "Clarification questions and answers:" in user and "<tools>" not in user:
        block = user.split("Clarification questions and answers:", 1)[1]
        tag = hashlib.sha256(block.encode()).hexdigest()[:6]
        return f"{sweep_reply(body)} {tag}"
    return sweep_reply(body)


def _webdancer_turn(user: str, messages: list[dict[str, Any]]) -> str:
    """search -> visit the first link -> answer with the visit's response."""
    question = user.rsplit("User:", 1)[-1].strip()
    users = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
    responses = [u for u in users[1:] if "<tool_response>" in u]  # the first one is the prompt
    if not responses:
        call = {"name": "search", "arguments": {"query": [question]}}
    elif len(responses) == 1 and (link := re.search(r"(local://\S+|https?://\S+)", responses[0])):
        call = {"name": "visit", "arguments": {"url": [link.group(1).rstrip(")")], "goal": question}}
    else:
        evidence = responses[-1].replace("<tool_response>", "").replace("</tool_response>", "").strip()
        return f"<think>I have enough evidence.</think>\n<answer>{evidence[:1500]}</answer>"
    return f"<think>Next step.</think>\n<tool_call>\n{json.dumps(call)}\n</tool_call>"


def _fake_gold(user: str) -> str:
    found = re.findall(r"^\[([^\]]+)\][^\n]*\n(.+)$", user, re.MULTILINE)[:3]
    nuggets = [
        {"id": f"n{i}", "text": snippet.strip()[:200], "weight": 3 - (i - 1) % 3, "evidence_ids": [eid]}
        for i, (eid, snippet) in enumerate(found, 1)
    ] or [{"id": "n1", "text": "no evidence", "weight": 1, "evidence_ids": []}]
    return json.dumps({"nuggets": nuggets, "must_cover": [], "missing_evidence": [], "unsupported_claims": []})


def _fake_labels(user: str) -> str:
    from cts.text.tokens import content_tokens

    answer = user.split("Nuggets:", 1)[0]
    have = set(content_tokens(answer))
    labels = {}
    for nid, text in re.findall(r"^(\S+): (.+)$", user.split("Nuggets:", 1)[1], re.MULTILINE):
        tokens = set(content_tokens(text))
        overlap = len(tokens & have) / len(tokens) if tokens else 0.0
        labels[nid] = "full" if overlap >= 0.8 else "partial" if overlap >= 0.4 else "none"
    return json.dumps(labels)


def main() -> None:
    """Serve until interrupted, replying ``ok`` (or ``--reply``) after ``--latency-ms``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--reply", default="ok")
    parser.add_argument("--protocol", action="store_true", help="answer prompts A-E validly (protocol_reply)")
    parser.add_argument("--max-in-flight", type=int, default=None, help="answer 429 above this many in flight")
    parser.add_argument("--retry-after", type=float, default=None, help="Retry-After seconds sent with those 429s")
    parser.add_argument("--rate-limit-every", type=int, default=None, help="answer 429 to every Nth request")
    args = parser.parse_args()
    server = ScriptedServer(
        latency_s=args.latency_ms / 1000,
        record=False,
        max_in_flight=args.max_in_flight,
        retry_after=args.retry_after,
        rate_limit_every=args.rate_limit_every,
    )
    server.default = args.reply
    server.handler = protocol_reply if args.protocol else None
    server.start()
    print(server.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
