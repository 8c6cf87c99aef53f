"""Trace documents leave the job's thread: one writer per tracking store, fed by a thread.

:meth:`TraceWriter.submit` only puts a document on a queue (no MLflow call, no pickling, no I/O
on the caller's thread, which in a sweep is the event loop's). A sender thread batches the
queue (up to :data:`~cts.tracking._tracewrite.BATCH` documents, or what came within
``linger_s`` of the first). It writes the first :data:`IN_PROCESS_DOCS` documents itself; a
job that traces more starts the writer process (:mod:`cts.tracking._writermain`), and each later
batch is piped to it and written on the other core. The process costs about 2 s of CPU to
start (it imports MLflow again), more than a small job's traces cost to write here (a few ms
each). :meth:`TraceWriter.flush` returns once everything submitted before it is in the store.

A writer can be started before its store may be opened (``open_store=False``): it opens the
store only once :meth:`TraceWriter.open` says so (or documents come). Closed before that, it
creates nothing: a command that fails its checks creates no store. A writer that starts its
process at once (``in_process_docs=0``) has it import MLflow on the other core while the job's
checks run, and kills it when closed held.

Should the writer process die, the sender writes the later batches itself (slower, nothing
lost from then on); documents the dead process had not written are what a resumed job's
backfill (:meth:`cts.tracking.InstanceTraces.backfill`) writes again.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import queue
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from cts.tracking._frames import read_frame, write_frame
from cts.tracking._outbox import mark_down
from cts.tracking._tracekeep import write_or_keep
from cts.tracking._tracewrite import BATCH
from cts.tracking._writermain import start_process

log = logging.getLogger(__name__)

_FLUSH_BASE_S = 60.0
_FLUSH_PER_DOC_S = 0.1  # a flush waits this long per document still on its way, beyond the base
MAX_BACKLOG = 1024
"""Documents submitted and not yet written above which :meth:`TraceWriter.submit` waits for the writer.

A document holds its instance's record and trace lines (a few KB): a job that commits instances
faster than the writer writes them (the offline job, a loaded machine) would otherwise hold
every one of them until its end (about 120 MB at 20,000 instances)."""
BACKLOG_WAIT_S = 120.0
"""How long a submit waits for room before the writer counts as stuck (later submits then never wait)."""
IN_PROCESS_DOCS = 256
"""Documents a writer writes in the job's own process before it starts its writer process.

Writing here costs a few ms of CPU a document; the process costs about 2 s to start. Below
this, as in tests, pilots and the plan's slices, the process would cost more than it saves."""


class TraceWriter:
    """The trace writer of one tracking store (see the module docstring).

    Args:
        uri: The tracking URI the traces go to.
        linger_s: How long the sender waits for more documents after the first of a batch.
        open_store: Whether the store may be opened now; when False the writer waits for
            :meth:`open` (or the first documents).
        in_process_docs: How many documents this process writes before it starts the writer
            process (0: the process starts now, and imports MLflow while the job's checks run).
    """

    def __init__(
        self, uri: str, linger_s: float = 0.05, open_store: bool = True, in_process_docs: int = IN_PROCESS_DOCS
    ) -> None:
        self.uri = uri
        self.linger_s = linger_s
        self.in_process_docs = in_process_docs
        self._opened = open_store
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._tokens = itertools.count(1)
        self._acks: dict[int, threading.Event] = {}
        self._results: dict[int, tuple[int, list[str]]] = {}
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # notified as written documents leave the backlog
        self._bounded = True  # False once a submit waited BACKLOG_WAIT_S in vain
        self._outstanding = 0
        self._sent_docs = 0  # piped to the process and not acknowledged yet
        self._sent_tokens: set[int] = set()  # flush or stop tokens piped to the process, not acknowledged yet
        self._here: Any = None  # this process's tracing client (or why it cannot open one), once it writes
        self._written_here = 0
        self._said_ended = False
        self._ended = threading.Event()  # the process's stdout closed: it ended (poll() can miss it)
        self._proc: subprocess.Popen[bytes] | None = None
        if in_process_docs <= 0:
            self._start(open_store)
        self._sender = threading.Thread(target=self._send_loop, name="cts-trace-sender", daemon=True)
        self._sender.start()

    def _start(self, open_store: bool) -> None:
        """Start the writer process and the threads that read its acknowledgements and its log."""
        self._proc = start_process(self.uri, open_store)
        for target, name in ((self._ack_loop, "cts-trace-acks"), (self._log_loop, "cts-trace-log")):
            threading.Thread(target=target, name=name, daemon=True).start()

    @property
    def held(self) -> bool:
        """Started with ``open_store=False`` and neither opened nor given documents since."""
        with self._lock:
            return not self._opened

    def open(self) -> None:
        """Let the process open the store (a writer started with ``open_store=False``; no-op otherwise)."""
        with self._lock:
            if self._opened:
                return
            self._opened = True
        self._queue.put(("open", None))

    def submit(self, docs: Sequence[Mapping[str, Any]]) -> None:
        """Queue documents for the store (the process opens the store for them).

        Returns at once, unless :data:`MAX_BACKLOG` documents are still on their way: then it
        waits for the writer, so that a job never holds more than that many.
        """
        with self._lock:
            self._wait_for_room()
            self._outstanding += len(docs)
            self._opened = True
        for doc in docs:
            self._queue.put(("doc", doc))

    def _wait_for_room(self) -> None:
        """With the lock held: wait until the backlog is below :data:`MAX_BACKLOG` (see :meth:`submit`)."""
        deadline = time.monotonic() + BACKLOG_WAIT_S
        while self._bounded and self._outstanding >= MAX_BACKLOG:
            if not self._room.wait(max(0.0, min(1.0, deadline - time.monotonic()))) and time.monotonic() >= deadline:
                self._bounded = False
                log.warning(
                    "the trace writer made no room for %.0f s; traces now queue without a bound", BACKLOG_WAIT_S
                )

    def flush(self, timeout_s: float | None = None) -> tuple[int, list[str]]:
        """Wait until every document submitted so far is written.

        Returns:
            How many traces were written since the last flush, and why any were not.

        Raises:
            TimeoutError: The writer did not get there within ``timeout_s`` (default: a minute plus
                a tenth of a second per document on its way).
        """
        return self._control("flush", timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, then end the writer process."""
        with self._lock:
            idle = self._outstanding == 0
            held = not self._opened
        proc = self._proc
        if held and idle:  # never told to open a store: nothing to write or wait for (a process still imports)
            if proc is not None:
                proc.kill()
            self._queue.put(("stop", 0))
        elif self._ended.is_set() and idle:  # ended (e.g. a store it could not open) with nothing to write
            self._queue.put(("stop", 0))
        elif (proc is not None and proc.poll() is None) or self._sender.is_alive():
            try:
                self._control("stop", timeout_s)
            except TimeoutError:
                log.warning("the trace writer did not finish in time; a resumed job writes what it missed")
        self._sender.join(5)
        proc = self._proc  # the sender may have started one meanwhile
        if proc is not None and proc.poll() is None:
            proc.kill()

    def _control(self, kind: str, timeout_s: float | None) -> tuple[int, list[str]]:
        token = next(self._tokens)
        event = threading.Event()
        with self._lock:
            self._acks[token] = event
            waiting = self._outstanding
        self._queue.put((kind, token))
        limit = timeout_s if timeout_s is not None else _FLUSH_BASE_S + _FLUSH_PER_DOC_S * waiting
        if not event.wait(limit):
            raise TimeoutError(f"{waiting} traces were not written within {limit:.0f} s")
        written, failures = self._results.pop(token, (0, []))
        for failure in failures:
            log.warning("a trace was not written: %s", failure)
        return written, failures

    def _send_loop(self) -> None:
        while True:
            kind, payload = self._queue.get()
            docs: list[Any] = []
            deadline = time.monotonic() + self.linger_s
            while kind == "doc":
                docs.append(payload)
                wait = deadline - time.monotonic()
                if len(docs) >= BATCH or wait <= 0:
                    kind = ""
                    break
                try:
                    kind, payload = self._queue.get(timeout=wait)
                except queue.Empty:
                    kind = ""
            if docs:
                self._send(("docs", docs), len(docs))
            if kind in ("open", "flush", "stop"):
                self._send((kind, payload), 0)
                if kind == "stop":
                    return

    def _send(self, message: tuple[str, Any], n_docs: int) -> None:
        kind, payload = message
        if self._proc is None and kind == "docs" and self._written_here + n_docs > self.in_process_docs:
            self._start(open_store=True)  # a job that traces more than a few: the other core writes the rest
        if self._proc is not None and self._piped(message, n_docs):
            return
        if kind != "docs":  # written here (no process, or it has ended): a control message has nothing to wait for
            self._done(payload, 0, 0, [])
            return
        if self._proc is not None and not self._said_ended:
            self._said_ended = True
            log.error("the trace writer process ended (exit %s); this process writes the traces", self._proc.poll())
        if self._here is None:
            self._here = _open_here(self.uri)
        self._written_here += n_docs
        if isinstance(self._here, str):
            self._done(None, n_docs, 0, [self._here] * n_docs)
            return
        client, experiments = self._here
        written, failures, down = write_or_keep(client, self.uri, payload, experiments)
        if down is not None:
            mark_down(self.uri, down, traces=written)
        self._done(None, n_docs, written, failures)

    def _piped(self, message: tuple[str, Any], n_docs: int) -> bool:
        """Pipe ``message`` to the process; False when it has ended (then this process does the work).

        What is piped counts as in the process before the write, so that the acknowledgement
        thread, should the process end meanwhile, releases exactly what the process held.
        """
        kind, payload = message
        token = payload if kind in ("flush", "stop") else None
        proc = self._proc
        assert proc is not None
        with self._lock:
            if self._ended.is_set():
                return False
            self._sent_docs += n_docs
            if token is not None:
                self._sent_tokens.add(token)
        try:
            assert proc.stdin is not None
            write_frame(proc.stdin, message)
            return True
        except (BrokenPipeError, OSError, ValueError):
            with self._lock:
                self._sent_docs -= n_docs
                self._sent_tokens.discard(token)  # a no-op for None (never added)
            return False

    def _ack_loop(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        while (message := read_frame(self._proc.stdout)) is not None:
            if message[0] == "down":  # the store stopped answering: the process keeps the traces in the job dirs
                mark_down(self.uri, message[1], traces=message[2])
                continue
            _, token, written, failures = message
            with self._lock:
                self._sent_docs = max(0, self._sent_docs - written - len(failures))
                self._sent_tokens.discard(token)
            self._done(token, written + len(failures), written, failures)
        self._release()

    def _release(self) -> None:
        """The process ended: no acknowledgement will come for what it held, so nobody waits for one.

        Only what was piped to it is released (the documents it had not written are what a resumed
        job's backfill writes); what is still queued, the sender writes in this process.
        """
        with self._lock:
            self._ended.set()
            lost, self._sent_docs = self._sent_docs, 0
            self._outstanding = max(0, self._outstanding - lost)
            self._room.notify_all()
            why = [f"{lost} on their way when the trace writer process ended"] if lost else []
            events = [self._acks.pop(t) for t in self._sent_tokens if t in self._acks]
            for token in self._sent_tokens:
                self._results[token] = (0, why)
            self._sent_tokens.clear()
        for event in events:
            event.set()

    def _done(self, token: int | None, n_docs: int, written: int, failures: list[str]) -> None:
        with self._lock:
            self._outstanding = max(0, self._outstanding - n_docs)
            self._room.notify_all()
            if token is None:
                carry = self._results.setdefault(-1, (0, []))
                self._results[-1] = (carry[0] + written, carry[1] + failures)
                return
            carry = self._results.pop(-1, (0, []))
            self._results[token] = (carry[0] + written, carry[1] + failures)
            event = self._acks.pop(token, None)
        if event is not None:
            event.set()

    def _log_loop(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for raw in self._proc.stderr:
            line = raw.decode("utf-8", errors="replace").rstrip()
            if line:
                log.info("%s", line)


def _open_here(uri: str) -> Any:
    """A tracing client of ``uri`` in this process with its experiments' cache, or why it cannot be opened.

    Documents come once their run exists, so this process has prepared the store by then. A
    string is every later trace's failure.
    """
    try:
        from mlflow.tracing.client import TracingClient

        from cts.tracking._sqlbulk import KnownExperiments

        return TracingClient(uri), KnownExperiments()
    except Exception as exc:  # noqa: BLE001 - the sender thread must go on acknowledging, whatever the store did
        return f"the store {uri} cannot be opened for traces ({type(exc).__name__}: {exc})"


_WRITERS: dict[str, TraceWriter] = {}
_WRITERS_LOCK = threading.Lock()


def writer_for(uri: str, open_store: bool = True, in_process_docs: int = IN_PROCESS_DOCS) -> TraceWriter:
    """This process's writer for ``uri`` (started on first use; every job of a sweep shares it).

    Args:
        uri: The tracking store.
        open_store: False starts (or keeps) the writer held: it leaves the store alone until a
            later call with True, or documents, open it.
        in_process_docs: A new writer's :class:`TraceWriter` argument (an existing one keeps its own).
    """
    with _WRITERS_LOCK:
        if uri not in _WRITERS:
            _WRITERS[uri] = TraceWriter(uri, open_store=open_store, in_process_docs=in_process_docs)
        writer = _WRITERS[uri]
    if open_store:
        writer.open()
    return writer


def start_trace_writer(uri: str, open_store: bool = True, in_process_docs: int = IN_PROCESS_DOCS) -> None:
    """Start this process's writer for ``uri`` now.

    A sweep run here that traces more than :data:`IN_PROCESS_DOCS` instances passes
    ``in_process_docs=0``: its writer process starts now and imports MLflow on the other core
    while the checks run (cts.compose.launch.steps).
    ``open_store=False`` starts it before the checks that decide whether the store may be
    created: a later ``start_trace_writer(uri)`` lets it open the store (see :class:`TraceWriter`).
    """
    writer_for(uri, open_store, in_process_docs)


def close_held_writers() -> None:
    """End this process's writers that were started held and never opened (a launch that stopped, or traces nobody wants)."""
    with _WRITERS_LOCK:
        held = {uri: writer for uri, writer in _WRITERS.items() if writer.held}
        for uri in held:
            del _WRITERS[uri]
    for writer in held.values():
        writer.close()


def flush_traces(uri: str) -> None:
    """Wait for the traces this process submitted to ``uri`` (nothing to do when it has no writer)."""
    with _WRITERS_LOCK:
        writer = _WRITERS.get(uri)
    if writer is not None:
        try:
            writer.flush()
        except TimeoutError as e:
            log.warning("traces still on their way to %s: %s (a resumed job writes them)", uri, e)


@atexit.register
def _close_writers() -> None:
    with _WRITERS_LOCK:
        writers = list(_WRITERS.values())
        _WRITERS.clear()
    for writer in writers:
        writer.close()
