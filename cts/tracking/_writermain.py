"""The trace writer's own process: batches of trace documents in on stdin, acknowledgements out on stdout.

The process (:func:`main`, started by :class:`cts.tracking._writer.TraceWriter`) reads
length-prefixed pickled messages (:func:`~cts.tracking._frames.read_frame`,
:func:`~cts.tracking._frames.write_frame`):

- ``("open", None)``: open the store (a writer started ``--held`` waits for it or for documents);
- ``("docs", [doc, ...])``: trace documents to write, with ``trace_id``, ``run_id`` and
  ``experiment_id`` set: pending ones (:func:`cts.tracking._tracedoc.pending_document`, whose
  spans this process builds) or built ones (:func:`cts.tracking._tracedoc.trace_document`),
  written by :func:`cts.tracking._tracewrite.write_traces`, each batch of them acknowledged with
  ``("ack", None, written, failures)`` (so the parent never holds more than it has to, see
  :data:`cts.tracking._writer.MAX_BACKLOG`);
- ``("flush", token)``: answered with ``("ack", token, 0, [])`` once every document
  sent before it is in the store;
- ``("stop", token)``: the same, then the process exits (as it does when stdin closes: its parent died).

SIGINT and SIGTERM are ignored: the parent, which gets them, flushes this process before it
exits, so a stopped job loses no trace.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from cts.tracking._frames import read_frame, write_frame
from cts.tracking._outbox import quiet
from cts.tracking._sqlbulk import KnownExperiments, load_mlflow_parts, write_in_bulk
from cts.tracking._tracekeep import write_or_keep
from cts.tracking._tracewrite import BATCH

log = logging.getLogger("cts.tracking.writer")


def serve(uri: str, inbox: IO[bytes], outbox: IO[bytes], held: bool = False) -> None:
    """Write what arrives on ``inbox`` until ``stop`` or its end; acknowledge flushes on ``outbox``.

    The parent batches documents (:class:`cts.tracking._writer.TraceWriter`), so each ``docs``
    message is written as it arrives. A ``held`` writer imports MLflow, then opens the store
    only on an ``open`` message or the first documents.
    """
    from mlflow.tracing.client import TracingClient  # noqa: F401 - imported now, while nothing waits for it

    load_mlflow_parts()
    gc.freeze()  # and never rescanned: a full collection over MLflow's objects costs more than a batch
    client = None if held else _open(uri)
    experiments = KnownExperiments()
    while True:
        message = read_frame(inbox)
        if message is None:
            return
        kind, payload = message
        if kind == "open":
            client = client or _open(uri)
            continue
        if kind == "docs":  # acknowledged at once: the parent holds only what is not written yet
            client = client or _open(uri)
            for start in range(0, len(payload), BATCH):
                n, failed, down = write_or_keep(client, uri, payload[start : start + BATCH], experiments)
                if down is not None:  # the job's process says which runs and traces did not reach the store
                    write_frame(outbox, ("down", down, n))
                write_frame(outbox, ("ack", None, n, failed))
            continue
        write_frame(outbox, ("ack", payload, 0, []))  # the documents before it were acknowledged as written
        if kind == "stop":
            return


def _open(uri: str) -> Any:
    """A tracing client of ``uri``, its store prepared (under the store's lock: the job may be creating it)."""
    from mlflow.tracing.client import TracingClient

    from cts.tracking._store import prepare_store

    prepare_store(uri)
    client = TracingClient(uri)
    write_in_bulk(client.store, [])
    gc.freeze()
    return client


_WRITER_MAIN = "from cts.core.errors import run_cli; from cts.tracking._writermain import main; run_cli(main)"
"""The writer process's program: a broken store ends it with the store's one message (cts.core.errors)."""


def start_process(uri: str, open_store: bool) -> subprocess.Popen[bytes]:
    """The writer process (:func:`cts.tracking._writermain.main`), in a session of its own (a Ctrl-C reaches only the job)."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER_MAIN, uri, *([] if open_store else ["--held"])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the writer process (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="trace writer: %(message)s")
    uri, *flags = argv if argv is not None else sys.argv[1:]  # python -c "...main()" <uri> [--held]
    quiet()  # a store found down is announced by the job's process, which knows its runs
    try:
        serve(uri, sys.stdin.buffer, sys.stdout.buffer, held="--held" in flags)
    except BaseException as exc:  # noqa: BLE001 - e.g. a store it cannot open: said once, then out
        log.error("%s", exc)
        sys.stderr.flush()
        os._exit(1)  # not a normal exit: threads MLflow started could hold the interpreter's shutdown


if __name__ == "__main__":
    main()
