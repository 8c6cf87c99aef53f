"""Per-job log files for jobs that share one process: ``<job dir>/<task name>.log``.

Hydra's basic launcher gives each job a file handler of its own, as each job runs
alone. Under the sweep scheduler the jobs run at once, so one handler on the root
logger routes every record to the file of the job it came from: the job is a
context variable, set in the job's thread and inherited by every task the job
starts on the shared event loop (:meth:`cts.sweep.SweepSession.run` runs them in
the job's context).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

from cts._util.secrets import RedactingFilter

JOB: contextvars.ContextVar[str | None] = contextvars.ContextVar("cts_sweep_job", default=None)
"""The job (its dir) the running code belongs to, or None outside a job."""

DEFAULT_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's job_logging file format


def current_job() -> str | None:
    """The job dir of the running code (None outside a job of a sweep session)."""
    return JOB.get()


class JobLogRouter(logging.Handler):
    """Writes each record to the log file of the job it was emitted in; drops the others.

    Args:
        fmt: The line format (Hydra's ``job_logging`` file format).
    """

    def __init__(self, fmt: str = DEFAULT_FORMAT) -> None:
        super().__init__(logging.NOTSET)
        self._files: dict[str, logging.FileHandler] = {}
        self._files_lock = threading.Lock()
        self.setFormatter(logging.Formatter(fmt))
        self.addFilter(RedactingFilter())  # keys masked, as by the job logging's handlers

    @contextlib.contextmanager
    def job(self, job_dir: Path, name: str) -> Iterator[None]:
        """Within the block (and every task started from it), log records also go to ``job_dir/name.log``."""
        job_dir.mkdir(parents=True, exist_ok=True)
        key = str(job_dir)
        handler = logging.FileHandler(job_dir / f"{name}.log", encoding="utf-8")
        handler.setFormatter(self.formatter)
        with self._files_lock:
            self._files[key] = handler
        token = JOB.set(key)
        try:
            yield
        finally:
            JOB.reset(token)
            with self._files_lock:
                self._files.pop(key, None)
            handler.close()

    def emit(self, record: logging.LogRecord) -> None:
        """Send ``record`` to its job's file (if it came from a job)."""
        key = JOB.get()
        if key is None:
            return
        with self._files_lock:
            handler = self._files.get(key)
        if handler is not None:
            handler.handle(record)

    def close(self) -> None:
        """Close every open job file."""
        with self._files_lock:
            handlers, self._files = list(self._files.values()), {}
        for handler in handlers:
            handler.close()
        super().close()


@contextlib.contextmanager
def routed_job_logs(fmt: str = DEFAULT_FORMAT) -> Iterator[JobLogRouter]:
    """Install a :class:`JobLogRouter` on the root logger for the block."""
    router = JobLogRouter(fmt)
    root = logging.getLogger()
    root.addHandler(router)
    try:
        yield router
    finally:
        root.removeHandler(router)
        router.close()
