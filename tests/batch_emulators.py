"""Loopback emulators of the OpenAI Batch API and Anthropic's Message Batches API.

Each is a subclass of its provider's live emulator (``tests/provider_emulators.py``), so a batched
request is answered by the same code as the live route (rules, schemas, :func:`conform`, token
counts, usage): a line's result body is the body the live endpoint would have answered, and a sweep
scores the same batched or live. Wire formats, field by field, from the providers' references:

* OpenAI (:class:`OpenAIBatchEmulator`): ``POST /v1/files`` (multipart, ``purpose=batch``),
  ``GET /v1/files/{id}`` and ``/content``, ``POST /v1/batches``, ``GET /v1/batches/{id}``,
  ``POST /v1/batches/{id}/cancel``, ``GET /v1/batches?limit=&after=``. The input file holds up to
  50,000 lines ``{custom_id, method: POST, url, body}``, one model for the whole batch; a file that
  breaks this fails the batch with ``errors.data[]`` ``{code, line, message, param}`` (codes here are
  the emulator's where OpenAI documents none). Output lines are ``{id: batch_req_..., custom_id,
  response: {status_code, request_id, body}, error}``; a request answered with an error status, and
  one that never ran (``error: {code: batch_expired | batch_cancelled, message}``, ``response: null``),
  go to the error file.
  https://platform.openai.com/docs/guides/batch,
  https://platform.openai.com/docs/api-reference/batch (Batch object, request input/output),
  https://platform.openai.com/docs/api-reference/files/create,
  https://developers.openai.com/api/reference/cli/resources/batches/methods/create/index.md
* Anthropic (:class:`AnthropicBatchEmulator`): ``POST /v1/messages/batches`` ``{requests:
  [{custom_id, params}]}`` (1 to 100,000; ``custom_id`` ``^[a-zA-Z0-9_-]{1,64}$``, unique), the
  create call's ``anthropic-beta`` applying to its requests; ``GET /v1/messages/batches/{id}``,
  ``.../cancel``, ``GET /v1/messages/batches`` (``limit``, ``before_id``, ``after_id``),
  ``.../results`` (JSONL once ``ended``: ``{custom_id, result: {type: succeeded, message} |
  {type: errored, error: <the live error body>} | {type: canceled} | {type: expired}}``), ``DELETE``.
  Params are validated per request while processing, so a request the live route refuses ends
  ``errored``. https://docs.anthropic.com/en/docs/build-with-claude/batch-processing,
  https://platform.claude.com/docs/en/api/messages/batches/create,
  https://platform.claude.com/docs/en/api/retrieving-message-batches,
  https://docs.anthropic.com/en/api/retrieving-message-batch-results

Injectable behaviour (constructor keywords, or attributes a test sets; ``expire`` and ``fail`` are
read when a batch is created and hold for it):

* ``delay_s`` (default 0.2): seconds from creation until a batch ends; ``polls_to_end``: it ends at
  its N-th retrieval (``GET`` of the batch). With both set, whichever comes first; ``None`` switches
  one off (both ``None``: a batch ends at once). Until then the requests run in order, in proportion
  to the time (or polls) gone, so a cancel keeps what finished before it.
* ``expire``: an ``int`` M (the first M requests run, the rest expire) or a predicate on
  ``custom_id`` (true: it runs); the batch then ends ``expired`` (OpenAI) / with ``expired`` results.
* ``fail``: a predicate on ``(custom_id, body)``; those requests error (OpenAI: a 500
  ``server_error`` line in the error file; Anthropic: ``errored`` with ``api_error``).
* ``fault``: ``(custom_id, body) -> None | int | "expired"``, asked once per line when its batch is
  created: None runs it, an HTTP status (500, 503, 504 ...) makes its line fail with that status
  (Anthropic: ``errored`` with the error type of the status), ``"expired"`` leaves it unrun (its
  batch then ends ``expired``). Transient infrastructure failures, line by line.
* ``stop()`` / ``start()`` / ``restart()`` / ``down(seconds)``: the server goes away (connections
  refused, open keep-alive connections dropped) and comes back on the same port with every file and
  batch kept, as a provider's batches outlive a client crash or a server blip.

Records: ``created_batches`` (:class:`CreatedBatch`), ``cancelled`` (batch ids), ``batched_lines``
(requests run inside batches), ``live_posts`` (POSTs to the live chat/messages route), and, as every
emulator, ``requests`` (every HTTP request, batch routes included).
"""

from __future__ import annotations

import functools
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import HTTP
from http.server import ThreadingHTTPServer
from typing import Any

from tests.llm_fakes import protocol_reply
from tests.provider_emulators import AnthropicEmulator, Handler, OpenAIEmulator, RawBody, Refusal, Seen

Expire = int | Callable[[str], bool] | None
Fail = Callable[[str, Mapping[str, Any]], bool] | None
Fault = Callable[[str, Mapping[str, Any]], int | str | None] | None
EXPIRED = "expired"
DAY_S = 24 * 3600


@dataclass(frozen=True)
class CreatedBatch:
    """A batch as it was created (for assertions)."""

    id: str
    custom_ids: tuple[str, ...]
    size: int
    """Requests in the batch (lines of the input file, or ``requests`` of the create call)."""
    input_file_id: str | None = None
    model: str | None = None


@dataclass
class Job:
    """One batch's state, kept across restarts."""

    id: str
    lines: list[tuple[str, dict[str, Any]]]  # (custom_id, request body), in input order
    headers: dict[str, str]  # the create call's: a request runs with them (auth, betas)
    runnable: list[int]  # indices that run; the others expire
    fail: Fail
    faults: dict[int, int] = field(default_factory=dict)  # index -> the HTTP status its line fails with
    created: float = field(default_factory=time.time)
    polls: int = 0
    results: dict[int, Any] = field(default_factory=dict)  # index -> provider-shaped result
    cancel_at: float | None = None
    ended_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # provider fields (endpoint, metadata, files, errors)


class _Server(ThreadingHTTPServer):
    """A loopback server that knows its open connections, so stopping it can drop them."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self, port: int, handler: Any) -> None:
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        for attempt in range(50):
            try:
                super().__init__(("127.0.0.1", port), handler)  # HTTPServer sets SO_REUSEADDR
                return
            except OSError:
                if attempt == 49:
                    raise
                time.sleep(0.02)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Close every open (keep-alive) connection: its client sees the server go."""
        with self.connections_lock:
            open_now = list(self.connections)
        for conn in open_now:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _BatchServing:
    """What both batch emulators share: timing, injected faults, records, restarts."""

    _httpd: Any
    _lock: threading.Lock
    requests: list[Seen]
    live_path: str

    def __init__(
        self,
        handler: Handler = protocol_reply,
        *,
        delay_s: float | None = 0.2,
        polls_to_end: int | None = None,
        expire: Expire = None,
        fail: Fail = None,
        fault: Fault = None,
    ) -> None:
        super().__init__(handler)  # type: ignore[call-arg]
        self.delay_s, self.polls_to_end, self.expire, self.fail = delay_s, polls_to_end, expire, fail
        self.fault = fault
        self.created_batches: list[CreatedBatch] = []
        self.cancelled: list[str] = []
        self.batched_lines = 0
        self.jobs: dict[str, Job] = {}
        self._jobs_lock = threading.RLock()
        self._up, self._closed, self._life = False, False, threading.Lock()
        self._timer: threading.Timer | None = None
        port, handler_class = self._httpd.server_address[1], self._httpd.RequestHandlerClass
        self._httpd.server_close()
        self._port, self._handler_class = port, handler_class
        self._httpd = _Server(port, handler_class)

    # -- the server's lifetime -------------------------------------------------------------
    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._life:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
        self.stop()

    def stop(self) -> None:
        """Stop serving: new connections are refused, open ones dropped; files and batches are kept."""
        with self._life:
            if not self._up:
                return
            self._up = False
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd.drop_connections()

    def start(self) -> None:
        """Serve (again) on the same port, with every file and batch as it was."""
        with self._life:
            if self._up or self._closed:
                return
            if self._httpd.socket.fileno() == -1:  # closed by a stop: bind the port anew
                self._httpd = _Server(self._port, self._handler_class)
            self._up = True
            # a short poll interval: a stop waits for the loop to see it
            threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def restart(self, down_s: float = 0.0) -> None:
        """Stop, stay down ``down_s`` seconds, and start again on the same port."""
        self.stop()
        time.sleep(down_s)
        self.start()

    def down(self, seconds: float) -> threading.Timer:
        """Stop now and start again after ``seconds`` (without blocking); returns the timer."""
        self.stop()
        with self._life:
            self._timer = threading.Timer(seconds, self.start)
            self._timer.daemon = True
            self._timer.start()
            return self._timer

    @property
    def live_posts(self) -> int:
        """POSTs to the live route (``/v1/chat/completions`` or ``/v1/messages``)."""
        with self._lock:
            return sum(1 for s in self.requests if s.method == "POST" and s.path == self.live_path)

    # -- routing ---------------------------------------------------------------------------
    routes: tuple[tuple[str, str, str], ...] = ()
    """(method, path pattern, method name): the batch routes; any other request goes to the live emulator."""

    def serve(self, seen: Seen) -> tuple[int, Any]:
        route = self.route(seen)
        if route is None:
            return super().serve(seen)  # type: ignore[misc]
        with self._lock:
            self.requests.append(seen)
        try:
            self.check_access(seen)
            with self._jobs_lock:
                return 200, route()
        except Refusal as refusal:
            with self._lock:
                (self.get_refusals if seen.method == "GET" else self.refusals).append((refusal.status, refusal.body))
            return refusal.status, refusal.body

    def route(self, seen: Seen) -> Callable[[], Any] | None:
        """The batch route ``seen`` calls, bound to its request and path ids (``None``: a live route)."""
        for method, pattern, name in self.routes:
            match = re.fullmatch(pattern, seen.path)
            if match and seen.method == method:
                return functools.partial(getattr(self, name), seen, *match.groups())
        return None

    def check_access(self, seen: Seen) -> None:
        raise NotImplementedError

    def job(self, job_id: str, poll: bool = False) -> Job:
        """The job ``job_id``, brought up to date (``poll``: this is a retrieval, which counts)."""
        job = self.jobs.get(job_id)
        if job is None:
            raise self.missing(job_id)
        job.polls += int(poll)
        self.observe(job)
        return job

    def missing(self, job_id: str) -> Refusal:
        raise NotImplementedError

    # -- a batch's progress ----------------------------------------------------------------
    def new_job(self, job_id: str, lines: list[tuple[str, dict[str, Any]]], headers: Mapping[str, str]) -> Job:
        """A job for ``lines`` under the ``expire`` and ``fail`` in force now."""
        expire = self.expire
        if expire is None:
            runnable = list(range(len(lines)))
        elif isinstance(expire, int):
            runnable = list(range(min(expire, len(lines))))
        else:
            runnable = [i for i, (cid, _) in enumerate(lines) if expire(cid)]
        found = {i: self.fault(cid, body) for i, (cid, body) in enumerate(lines)} if self.fault else {}
        runnable = [i for i in runnable if found.get(i) != EXPIRED]
        faults = {i: int(status) for i, status in found.items() if status not in (None, EXPIRED)}
        job = Job(job_id, lines, dict(headers), runnable, self.fail, faults)
        self.jobs[job_id] = job
        return job

    def progress(self, job: Job) -> float:
        """How far ``job`` has come (1: its processing is over)."""
        fractions = []
        if self.delay_s is not None:
            fractions.append((time.time() - job.created) / self.delay_s if self.delay_s > 0 else 1.0)
        if self.polls_to_end is not None:
            fractions.append(job.polls / self.polls_to_end if self.polls_to_end > 0 else 1.0)
        return max(fractions, default=1.0)

    def observe(self, job: Job) -> None:
        """Bring ``job`` up to date (a subclass may add a step before processing)."""
        self.advance(job)

    def advance(self, job: Job) -> None:
        """Run the requests due by now and end the job when its time has come.

        A cancelled job runs nothing more and ends at its next retrieval.
        """
        if job.ended_at is not None:
            return
        if job.cancel_at is not None:
            if job.polls > job.extra["cancel_polls"]:
                self.end(job)
            return
        fraction = self.progress(job)
        due = len(job.runnable) if fraction >= 1 else int(len(job.runnable) * fraction)
        for index in job.runnable[:due]:
            if index not in job.results:
                cid, body = job.lines[index]
                failing = job.fail is not None and bool(job.fail(cid, body))
                job.results[index] = self.run_line(job, cid, body, job.faults.get(index, 500 if failing else 0))
                self.batched_lines += 1
        if fraction >= 1:
            self.end(job)

    def end(self, job: Job) -> None:
        job.ended_at = time.time()
        self.finish(job)

    def cancel(self, job: Job) -> None:
        """Start cancelling: what ran so far keeps its result; the next retrieval ends the job."""
        if job.ended_at is None and job.cancel_at is None:
            job.cancel_at = time.time()
            job.extra["cancel_polls"] = job.polls
            self.cancelled.append(job.id)

    def run_line(self, job: Job, custom_id: str, body: dict[str, Any], failing: int) -> Any:
        """The provider-shaped result of one request (the live answer, or its refusal; ``failing``: the
        HTTP status of an injected failure, 0 for none)."""
        raise NotImplementedError

    def finish(self, job: Job) -> None:
        """Called once when ``job`` ends (OpenAI writes its files here)."""


def iso(t: float | None) -> str | None:
    """RFC 3339 time, as Anthropic writes it (``2024-08-20T18:37:24.100435Z``)."""
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a ``multipart/form-data`` body: name -> (filename, bytes)."""
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts() if message.is_multipart() else []:
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str):
            fields[name] = (part.get_filename(), part.get_payload(decode=True) or b"")
    return fields


def page(items: list[dict[str, Any]], limit: int, after: str | None, before: str | None = None) -> dict[str, Any]:
    """A newest-first page of ``items`` (each with an ``id``) after/before a cursor."""
    ids = [item["id"] for item in items]
    if after in ids:
        items = items[ids.index(after) + 1 :]
    elif before in ids:
        items = items[: ids.index(before)][-limit:]
    data = items[:limit]
    return {
        "data": data,
        "has_more": len(items) > len(data),
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


FILE_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")


class OpenAIBatchEmulator(_BatchServing, OpenAIEmulator):
    """OpenAI's Files and Batch APIs over :class:`OpenAIEmulator`'s chat completions (module docstring).

    Args:
        handler: The deterministic model.
        delay_s: Seconds from creation until a batch ends (``None``: by polls only).
        polls_to_end: A batch ends at its N-th ``GET /v1/batches/{id}`` (``None``: by time only).
        expire: First M requests run (``int``) or a predicate on ``custom_id``; the rest expire.
        fail: Predicate on ``(custom_id, body)``: those requests answer 500 ``server_error``.
        fault: Per line, None, an HTTP status its line fails with, or ``"expired"`` (module docstring).

    A batch is ``validating`` when created and ``failed`` or ``in_progress`` at its first observation;
    a cancelled one is ``cancelling`` until its next retrieval, then ``cancelled``.
    """

    live_path = "/v1/chat/completions"
    max_lines = 50_000
    endpoints: tuple[str, ...] = ("/v1/chat/completions",)
    routes = (
        ("POST", r"/v1/files", "upload"),
        ("GET", r"/v1/files", "list_files"),
        ("GET", r"/v1/files/([^/]+)", "get_file"),
        ("GET", r"/v1/files/([^/]+)/content", "file_content"),
        ("POST", r"/v1/batches", "create_batch"),
        ("GET", r"/v1/batches", "list_batches"),
        ("GET", r"/v1/batches/([^/]+)", "get_batch"),
        ("POST", r"/v1/batches/([^/]+)/cancel", "cancel_batch"),
    )

    def __init__(
        self,
        handler: Handler = protocol_reply,
        *,
        delay_s: float | None = 0.2,
        polls_to_end: int | None = None,
        expire: Expire = None,
        fail: Fail = None,
        fault: Fault = None,
    ) -> None:
        super().__init__(handler, delay_s=delay_s, polls_to_end=polls_to_end, expire=expire, fail=fail, fault=fault)
        self.files: dict[str, dict[str, Any]] = {}  # id -> File object
        self.file_data: dict[str, bytes] = {}

    def check_access(self, seen: Seen) -> None:
        self.authorise(seen)

    def missing(self, job_id: str) -> Refusal:
        return Refusal(
            404,
            {
                "error": {
                    "message": f"No batch found with id '{job_id}'.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            },
        )

    # -- files ------------------------------------------------------------------------------
    def upload(self, seen: Seen) -> dict[str, Any]:
        fields = multipart(seen.headers.get("content-type", ""), seen.raw)
        for name in ("file", "purpose"):
            if name not in fields:
                raise self.error(400, "missing_required_parameter", f"Missing required parameter: '{name}'.", name)
        purpose = fields["purpose"][1].decode()
        if purpose not in FILE_PURPOSES:
            raise self.error(
                400,
                "invalid_value",
                f"Invalid value: '{purpose}'. Supported values are: {', '.join(map(repr, FILE_PURPOSES))}.",
                "purpose",
            )
        filename, data = fields["file"]
        return self.store_file(filename or "upload", data, purpose)

    def store_file(self, filename: str, data: bytes, purpose: str) -> dict[str, Any]:
        """Keep ``data`` as a file; its File object."""
        file_id = f"file-{uuid.uuid4().hex[:22]}"
        self.files[file_id] = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }
        self.file_data[file_id] = data
        return self.files[file_id]

    def get_file(self, seen: Seen, file_id: str) -> dict[str, Any]:
        if file_id not in self.files:
            raise Refusal(
                404,
                {
                    "error": {
                        "message": f"No such File object: {file_id}",
                        "type": "invalid_request_error",
                        "param": "id",
                        "code": None,
                    }
                },
            )
        return self.files[file_id]

    def file_content(self, seen: Seen, file_id: str) -> RawBody:
        self.get_file(seen, file_id)
        return RawBody(self.file_data[file_id], "application/octet-stream")

    def list_files(self, seen: Seen) -> dict[str, Any]:
        return {"object": "list", "data": list(self.files.values())[::-1], "has_more": False}

    # -- batches ----------------------------------------------------------------------------
    def create_batch(self, seen: Seen) -> dict[str, Any]:
        body = seen.body if isinstance(seen.body, dict) else {}
        for name in ("input_file_id", "endpoint", "completion_window"):
            if not body.get(name):
                raise self.error(400, "missing_required_parameter", f"Missing required parameter: '{name}'.", name)
        endpoint, window = body["endpoint"], body["completion_window"]
        if endpoint not in self.endpoints:
            raise self.error(
                400,
                "invalid_value",
                f"Invalid value: '{endpoint}'. Supported values are: {', '.join(map(repr, self.endpoints))}.",
                "endpoint",
            )
        if window != "24h":
            raise self.error(
                400, "invalid_value", f"Invalid value: '{window}'. Supported values are: '24h'.", "completion_window"
            )
        file = self.get_file(seen, str(body["input_file_id"]))
        if file["purpose"] != "batch":
            raise self.error(
                400, "invalid_value", "The input file must be uploaded with purpose 'batch'.", "input_file_id"
            )
        lines, errors, model = self.parse_input(self.file_data[file["id"]], endpoint)
        job = self.new_job(f"batch_{uuid.uuid4().hex[:24]}", [] if errors else lines, seen.headers)
        job.extra.update(
            endpoint=endpoint,
            input_file_id=file["id"],
            window=window,
            errors=errors,
            model=model,
            metadata=body.get("metadata"),
            validated=False,
        )
        self.created_batches.append(CreatedBatch(job.id, tuple(cid for cid, _ in lines), len(lines), file["id"], model))
        return self.batch_object(job)

    def parse_input(self, data: bytes, endpoint: str) -> tuple[list[tuple[str, dict[str, Any]]], list[Any], str | None]:
        """The input file's requests, the validation errors OpenAI would report, and the batch's model."""
        lines: list[tuple[str, dict[str, Any]]] = []
        errors: list[dict[str, Any]] = []
        rows = [row for row in data.decode("utf-8", "replace").splitlines() if row.strip()]
        if not rows:
            errors.append(_line_error("empty_file", None, "The input file contains no requests.", None))
        if len(rows) > self.max_lines:
            errors.append(
                _line_error(
                    "too_many_requests",
                    None,
                    f"The input file has {len(rows)} requests; a batch takes at most {self.max_lines}.",
                    None,
                )
            )
        ids: set[str] = set()
        model: str | None = None
        for n, row in enumerate(rows, 1):
            try:
                item = json.loads(row)
            except ValueError:
                item = None
            if not isinstance(item, dict):
                errors.append(_line_error("invalid_json_line", n, "This line is not parseable as valid JSON.", None))
                continue
            problems, model = _line_problems(item, ids, endpoint, model)
            errors += [_line_error(code, n, message, param) for code, message, param in problems]
            if not problems:
                lines.append((item["custom_id"], item["body"]))
        return lines, errors, model

    def observe(self, job: Job) -> None:
        if not job.extra["validated"]:
            job.extra["validated"] = True
            if job.extra["errors"]:
                job.ended_at = time.time()
                return
            job.extra["in_progress_at"] = int(time.time())
        self.advance(job)

    def get_batch(self, seen: Seen, job_id: str) -> dict[str, Any]:
        return self.batch_object(self.job(job_id, poll=True))

    def cancel_batch(self, seen: Seen, job_id: str) -> dict[str, Any]:
        job = self.job(job_id)
        status = self.status(job)
        if status not in ("validating", "in_progress", "cancelling"):
            raise self.error(400, "", f"Cannot cancel a batch with status '{status}'.")
        self.cancel(job)
        return self.batch_object(job)

    def list_batches(self, seen: Seen) -> dict[str, Any]:
        limit = max(1, min(100, int((seen.query.get("limit") or ["20"])[0])))
        after = (seen.query.get("after") or [None])[0]
        jobs = [self.job(job_id) for job_id in reversed(list(self.jobs))]
        return {"object": "list", **page([self.batch_object(j) for j in jobs], limit, after)}

    def run_line(self, job: Job, custom_id: str, body: dict[str, Any], failing: int) -> dict[str, Any]:
        if failing:
            refusal = self.error(failing, "server_error", "The server had an error while processing your request.")
            status, out = refusal.status, refusal.body
        else:
            seen = Seen("POST", job.extra["endpoint"], {}, job.headers, body, json.dumps(body).encode())
            try:
                status, out = 200, self.answer(seen)
            except Refusal as refusal:
                status, out = refusal.status, refusal.body
        return {
            "id": f"batch_req_{uuid.uuid4().hex[:24]}",
            "custom_id": custom_id,
            "response": {"status_code": status, "request_id": uuid.uuid4().hex, "body": out},
            "error": None,
        }

    def finish(self, job: Job) -> None:
        """Write the output file (answered requests) and the error file (refused, failed, never run)."""
        done: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for index, (cid, _) in enumerate(job.lines):
            result = job.results.get(index)
            if result is None:
                errors.append(
                    {
                        "id": f"batch_req_{uuid.uuid4().hex[:24]}",
                        "custom_id": cid,
                        "response": None,
                        "error": _unrun_error(job.cancel_at is not None),
                    }
                )
            else:
                (done if result["response"]["status_code"] == 200 else errors).append(result)
        for kind, rows in (("output", done), ("error", errors)):
            if rows:
                data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
                job.extra[f"{kind}_file_id"] = self.store_file(f"{job.id}_{kind}.jsonl", data, "batch_output")["id"]

    def status(self, job: Job) -> str:
        """The batch's ``status``."""
        if not job.extra["validated"]:
            return "validating"
        if job.extra["errors"]:
            return "failed"
        if job.ended_at is None:
            return "in_progress" if job.cancel_at is None else "cancelling"
        if job.cancel_at is not None:
            return "cancelled"
        return "expired" if len(job.runnable) < len(job.lines) else "completed"

    def batch_object(self, job: Job) -> dict[str, Any]:
        """The Batch object, field by field as OpenAI's reference lists it."""
        x, status = job.extra, self.status(job)
        ended = None if job.ended_at is None else int(job.ended_at)
        results = [r["response"] for r in job.results.values()]
        return {
            "id": job.id,
            "object": "batch",
            "endpoint": x["endpoint"],
            "model": x["model"],
            "errors": {"object": "list", "data": x["errors"]} if x["errors"] else None,
            "input_file_id": x["input_file_id"],
            "completion_window": x["window"],
            "status": status,
            "output_file_id": x.get("output_file_id"),
            "error_file_id": x.get("error_file_id"),
            "created_at": int(job.created),
            "in_progress_at": x.get("in_progress_at"),
            "expires_at": int(job.created) + DAY_S,
            "finalizing_at": ended if status in ("completed", "expired") else None,
            "completed_at": ended if status == "completed" else None,
            "failed_at": ended if status == "failed" else None,
            "expired_at": ended if status == "expired" else None,
            "cancelling_at": None if job.cancel_at is None else int(job.cancel_at),
            "cancelled_at": ended if status == "cancelled" else None,
            "request_counts": {
                "total": len(job.lines),
                "completed": sum(1 for r in results if r["status_code"] == 200),
                "failed": sum(1 for r in results if r["status_code"] != 200),
            },
            "metadata": x["metadata"],
            "usage": _batch_usage([r["body"]["usage"] for r in results if r["status_code"] == 200]),
        }


def _line_error(code: str, line: int | None, message: str, param: str | None) -> dict[str, Any]:
    return {"code": code, "line": line, "message": message, "param": param}


def _line_problems(
    item: Mapping[str, Any], ids: set[str], endpoint: str, model: str | None
) -> tuple[list[tuple[str, str, str]], str | None]:
    """(code, message, param) of what is wrong with one input line; the batch's model so far."""
    problems = []
    cid = item.get("custom_id")
    if not isinstance(cid, str) or not cid:
        problems.append(("missing_required_parameter", "Missing required parameter: 'custom_id'.", "custom_id"))
    elif cid in ids:
        problems.append(
            (
                "duplicate_custom_id",
                "The custom_id for this request is a duplicate of another "
                "request. The custom_id parameter must be unique for each request in a batch.",
                "custom_id",
            )
        )
    else:
        ids.add(cid)
    if item.get("method") != "POST":
        problems.append(("invalid_method", "The method of a batch request must be 'POST'.", "method"))
    if item.get("url") != endpoint:
        problems.append(
            ("invalid_url", f"The URL of this request does not match the batch's endpoint '{endpoint}'.", "url")
        )
    body = item.get("body")
    if not isinstance(body, dict) or not body.get("model"):
        problems.append(("missing_required_parameter", "Missing required parameter: 'body.model'.", "body.model"))
    elif model is not None and body["model"] != model:
        problems.append(
            (
                "mismatched_model",
                f"The model '{body['model']}' of this request differs from the "
                f"batch's model '{model}': a batch's requests must all use the same model.",
                "body.model",
            )
        )
    elif model is None:
        model = str(body["model"])
    return problems, model


_ANTHROPIC_ERRORS = {429: "rate_limit_error", 504: "timeout_error", 529: "overloaded_error"}
"""Anthropic's error type of an HTTP status (https://docs.anthropic.com/en/api/errors); others: ``api_error``."""


def _unrun_error(cancelled: bool) -> dict[str, str]:
    if cancelled:
        return {"code": "batch_cancelled", "message": "This request was not executed: the batch was cancelled."}
    return {
        "code": "batch_expired",
        "message": "This request could not be executed before the completion window expired.",
    }


def _batch_usage(usages: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The Batch object's ``usage``: the sums over its answered requests."""
    total = {key: sum(int(u.get(key, 0)) for u in usages) for key in ("prompt_tokens", "completion_tokens")}
    reasoning = sum(int((u.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)) for u in usages)
    cached = sum(int((u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)) for u in usages)
    return {
        "input_tokens": total["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": total["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total["prompt_tokens"] + total["completion_tokens"],
    }


CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class AnthropicBatchEmulator(_BatchServing, AnthropicEmulator):
    """Anthropic's Message Batches API over :class:`AnthropicEmulator`'s Messages route (module docstring).

    Args:
        handler: The deterministic model.
        delay_s: Seconds from creation until a batch ends (``None``: by polls only).
        polls_to_end: A batch ends at its N-th ``GET /v1/messages/batches/{id}`` (``None``: by time only).
        expire: First M requests run (``int``) or a predicate on ``custom_id``; the rest expire.
        fail: Predicate on ``(custom_id, params)``: those requests end ``errored`` with ``api_error``.
        fault: Per line, None, an HTTP status it ends ``errored`` with, or ``"expired"`` (module docstring).

    A cancelled batch is ``canceling`` until its next retrieval, then ``ended``.
    """

    live_path = "/v1/messages"
    max_requests = 100_000
    routes = (
        ("POST", r"/v1/messages/batches", "create_batch"),
        ("GET", r"/v1/messages/batches", "list_batches"),
        ("GET", r"/v1/messages/batches/([^/]+)", "get_batch"),
        ("POST", r"/v1/messages/batches/([^/]+)/cancel", "cancel_batch"),
        ("GET", r"/v1/messages/batches/([^/]+)/results", "results"),
        ("DELETE", r"/v1/messages/batches/([^/]+)", "delete_batch"),
    )

    def check_access(self, seen: Seen) -> None:
        """The headers the live route requires."""
        if not seen.headers.get("x-api-key"):
            raise self.error(401, "authentication_error", "x-api-key header is required")
        if not seen.headers.get("anthropic-version"):
            raise self.error(400, "invalid_request_error", "anthropic-version: header is required")

    def missing(self, job_id: str) -> Refusal:
        return self.error(404, "not_found_error", f"Message Batch {job_id} not found")

    def create_batch(self, seen: Seen) -> dict[str, Any]:
        requests = seen.body.get("requests") if isinstance(seen.body, dict) else None
        if not isinstance(requests, list):
            raise self.error(400, "invalid_request_error", "requests: Field required")
        if not 1 <= len(requests) <= self.max_requests:
            bound = "at least 1 item" if not requests else f"at most {self.max_requests} items"
            raise self.error(
                400,
                "invalid_request_error",
                f"requests: List should have {bound} after validation, not {len(requests)}",
            )
        lines: list[tuple[str, dict[str, Any]]] = []
        for i, request in enumerate(requests):
            cid = request.get("custom_id") if isinstance(request, dict) else None
            if not isinstance(cid, str) or not CUSTOM_ID.fullmatch(cid):
                raise self.error(
                    400,
                    "invalid_request_error",
                    f"requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'",
                )
            if not isinstance(request.get("params"), dict):
                raise self.error(400, "invalid_request_error", f"requests.{i}.params: Field required")
            if any(cid == seen_id for seen_id, _ in lines):
                raise self.error(
                    400,
                    "invalid_request_error",
                    f"requests.{i}.custom_id: '{cid}' is not unique; "
                    "custom_id must be unique for each request within the Message Batch.",
                )
            lines.append((cid, request["params"]))
        job = self.new_job(f"msgbatch_{uuid.uuid4().hex[:24]}", lines, seen.headers)
        models = {str(params.get("model")) for _, params in lines}
        self.created_batches.append(
            CreatedBatch(
                job.id, tuple(cid for cid, _ in lines), len(lines), None, models.pop() if len(models) == 1 else None
            )
        )
        return self.batch_object(job)

    def get_batch(self, seen: Seen, job_id: str) -> dict[str, Any]:
        return self.batch_object(self.job(job_id, poll=True))

    def cancel_batch(self, seen: Seen, job_id: str) -> dict[str, Any]:
        job = self.job(job_id)
        if job.ended_at is not None:
            raise self.error(400, "invalid_request_error", f"Message Batch {job_id} has already ended.")
        self.cancel(job)
        return self.batch_object(job)

    def list_batches(self, seen: Seen) -> dict[str, Any]:
        limit = max(1, min(1000, int((seen.query.get("limit") or ["20"])[0])))
        after, before = ((seen.query.get(k) or [None])[0] for k in ("after_id", "before_id"))
        jobs = [self.job(job_id) for job_id in reversed(list(self.jobs))]
        return page([self.batch_object(j) for j in jobs], limit, after, before)

    def results(self, seen: Seen, job_id: str) -> RawBody:
        job = self.job(job_id)
        if job.ended_at is None:
            raise self.error(
                400,
                "invalid_request_error",
                f"Message Batch {job_id} has not ended yet; its results are available once it has.",
            )
        rows = [{"custom_id": cid, "result": self.result(job, i)} for i, (cid, _) in enumerate(job.lines)]
        return RawBody("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode(), "application/binary")

    def delete_batch(self, seen: Seen, job_id: str) -> dict[str, Any]:
        job = self.job(job_id)
        if job.ended_at is None:
            raise self.error(
                400,
                "invalid_request_error",
                f"Message Batch {job_id} is still processing; cancel it before deleting it.",
            )
        del self.jobs[job_id]
        return {"id": job_id, "type": "message_batch_deleted"}

    def run_line(self, job: Job, custom_id: str, body: dict[str, Any], failing: int) -> dict[str, Any]:
        if failing:
            kind = _ANTHROPIC_ERRORS.get(failing, "api_error")
            return {"type": "errored", "error": self.error(failing, kind, f"HTTP {failing}: injected failure").body}
        try:
            message = self.answer(Seen("POST", self.live_path, {}, job.headers, body, json.dumps(body).encode()))
        except Refusal as refusal:
            return {"type": "errored", "error": refusal.body}
        return {"type": "succeeded", "message": message}

    def result(self, job: Job, index: int) -> dict[str, Any]:
        """Request ``index``'s result: its own, or why it never ran."""
        if index in job.results:
            return job.results[index]
        if job.ended_at is None:
            return {"type": "processing"}
        return {"type": "canceled" if job.cancel_at is not None else "expired"}

    def batch_object(self, job: Job) -> dict[str, Any]:
        """The MessageBatch object, field by field as Anthropic's reference lists it."""
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        for index in range(len(job.lines)):
            counts[self.result(job, index)["type"]] += 1
        ended = job.ended_at is not None
        return {
            "id": job.id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress" if job.cancel_at is None else "canceling",
            "request_counts": counts,
            "ended_at": iso(job.ended_at),
            "created_at": iso(job.created),
            "expires_at": iso(job.created + DAY_S),
            "cancel_initiated_at": iso(job.cancel_at),
            "archived_at": None,
            "results_url": f"{self.url}/v1/messages/batches/{job.id}/results" if ended else None,
        }


__all__ = ["AnthropicBatchEmulator", "CreatedBatch", "Job", "OpenAIBatchEmulator"]
