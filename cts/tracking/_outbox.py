"""What a job's run could not write to a tracking server that stopped answering: kept in the job dir.

Every MLflow call of a job's run after its start goes through :func:`call`. When a call to a
tracking server fails and the server does not answer a probe either, the store is *down* for this
process: the call, and every later one of any run, is appended to its job dir's
:data:`OUTBOX_FILE` instead (the traces, by the trace writer, to :data:`TRACES_OUTBOX_FILE`), at
once, with no further retry. The LLM work goes on; records stream to the job dirs as always. At
its end the job says what waits in its dir (:func:`unsent`), and ``python -m cts.tracking.fill``
writes it once the server is back (:mod:`cts.tracking.fill`), without any LLM call.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from cts.tracking import _checks
from cts.tracking._checks import server_down

log = logging.getLogger(__name__)
T = TypeVar("T")

OUTBOX_FILE = "tracking_outbox.jsonl"
"""A job dir's run-level calls that did not reach the store, one JSON object a line, in call order."""
TRACES_OUTBOX_FILE = "tracking_outbox_traces.jsonl"
"""A job dir's trace documents (spans built) that did not reach the store."""
FILL_COMMAND = "python -m cts.tracking.fill"
_RECHECK_S = 3.0  # the probe after a failed call: the server answered or not, once

_DOWN: dict[str, str] = {}  # tracking URI -> why it is down (this process)
_RUNS: dict[str, Path] = {}  # run id -> its job dir (the runs this process has open)
_LOCK = threading.Lock()
_ANNOUNCE = [True]  # the trace writer's process leaves the announcement to the job's, which knows the runs


def quiet() -> None:
    """This process does not announce a store found down (the trace writer's: its job's process does)."""
    _ANNOUNCE[0] = False


def register_run(run_id: str, job_dir: Path | None) -> None:
    """``run_id``'s calls go to ``job_dir``'s outbox should its store go down (None: a run without a job dir)."""
    if job_dir is not None:
        with _LOCK:
            _RUNS[run_id] = job_dir


def check_store(uri: str) -> None:
    """:func:`cts.tracking._checks.check_store` at a launch's start; a server that answers is no longer down here."""
    _checks.check_store(uri)
    with _LOCK:
        _DOWN.pop(uri, None)


def forget_run(run_id: str) -> None:
    """The run has ended in this process."""
    with _LOCK:
        _RUNS.pop(run_id, None)


def job_dir_of(run_id: str) -> Path | None:
    """The job dir of a run this process has open (None when unknown)."""
    with _LOCK:
        return _RUNS.get(run_id)


def store_down(uri: str) -> str | None:
    """Why the store at ``uri`` is down for this process (None while it is not)."""
    with _LOCK:
        return _DOWN.get(uri)


def mark_down(uri: str, why: str, traces: int = 0) -> None:
    """The store stopped answering: from now on this process keeps its writes in the job dirs; say so once."""
    with _LOCK:
        if uri in _DOWN:
            return
        _DOWN[uri] = why
        if not _ANNOUNCE[0]:
            return
        dirs = sorted({str(d) for d in _RUNS.values()})
        runs = ", ".join(sorted(_RUNS)) or "none open"
    where = _common_dir(dirs)
    log.error(
        "the MLflow store %s stopped answering (%s); the jobs go on and keep what it misses in their dirs "
        "(%s): runs %s%s. Once it is back: %s %s",
        uri,
        why,
        OUTBOX_FILE,
        runs,
        f", {traces} traces so far" if traces else "",
        FILL_COMMAND,
        where,
    )


def _common_dir(dirs: list[str]) -> str:
    return os.path.commonpath(dirs) if dirs else "<job or sweep dir>"


def unreachable(uri: str, error: BaseException) -> bool:
    """Whether ``error`` of a call to ``uri`` means a tracking server that does not answer (it is then down)."""
    if store_down(uri) is not None:
        return True
    if not uri.startswith(("http://", "https://")):
        return False
    why = server_down(uri, _RECHECK_S)
    if why is None:
        return False
    mark_down(uri, why)
    return True


def call(
    uri: str, run_id: str, op: Mapping[str, Any] | Callable[[], Mapping[str, Any]], fn: Callable[[], T]
) -> T | None:
    """``fn()``, a call of ``run_id`` to the store at ``uri``; kept as ``op`` in the job dir when the store is down.

    Args:
        op: The call as JSON (``{"op": name, ...}``), what :mod:`cts.tracking.fill` replays; or a
            function that builds it, called only when the call is kept (a large call's data is not held).

    Returns:
        What ``fn`` returned, or None when the call was kept.
    """
    if store_down(uri) is None:
        try:
            return fn()
        except Exception as e:
            if not unreachable(uri, e):
                raise
    keep(run_id, op() if callable(op) else op)
    return None


def keep(run_id: str, op: Mapping[str, Any]) -> None:
    """Append ``op`` to the outbox of ``run_id``'s job dir (a run without one loses it, and says so)."""
    job_dir = job_dir_of(run_id)
    if job_dir is None:
        log.warning("the store is down: %s of run %s is lost (the run has no job dir)", op.get("op"), run_id)
        return
    append_lines(job_dir / OUTBOX_FILE, [{**op, "run_id": run_id}])


def append_lines(path: Path, rows: list[Mapping[str, Any]]) -> None:
    """Append JSON lines to ``path`` and flush them (a killed job keeps what was kept)."""
    text = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows)
    path.parent.mkdir(parents=True, exist_ok=True)  # a run kept from its start: before the job made its dir
    with _LOCK, path.open("a", encoding="utf-8") as f:
        f.write(text)


def unsent(job_dir: Path) -> tuple[int, int]:
    """How many run calls and traces wait in ``job_dir``'s outbox."""

    def lines(name: str) -> int:
        path = job_dir / name
        return sum(1 for line in path.open(encoding="utf-8") if line.strip()) if path.is_file() else 0

    return lines(OUTBOX_FILE), lines(TRACES_OUTBOX_FILE)


def reset() -> None:
    """Forget the stores found down and the runs registered (a test, a new launch in a notebook)."""
    with _LOCK:
        _DOWN.clear()
        _RUNS.clear()
