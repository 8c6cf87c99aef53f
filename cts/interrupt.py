"""Stopping a job by a signal: one clean line, a resumable job dir, no tracebacks.

SIGTERM is turned into SIGINT, so both take the same path: inside ``asyncio.run``
the event loop cancels the job (the pipeline's ``finally`` cancels in-flight
instances and closes the record files, every finished record already flushed);
elsewhere Python raises KeyboardInterrupt. :func:`cts.tracking.job_run` ends the
MLflow run ``KILLED`` on the way out, and :func:`interruptible_job` prints how many
instances are done and the exact command that resumes the job, then exits
128 + the signal number.

SIGKILL cannot be caught: the job dir keeps its records and the MLflow run id
(``mlflow_run.json``), and a resume into the same dir continues that run.

A job dir is also locked while a job runs in it, so two processes never append to
the same records or update the same run.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType

from filelock import FileLock, Timeout

LOCK_FILE = ".cts.lock"
_received: list[int] = []


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):  # SIGINT ignored or default at the C level
        raise KeyboardInterrupt
    handler(signal.SIGINT, frame)  # asyncio's handler cancels the job; the default one raises


@contextlib.contextmanager
def sigterm_as_sigint() -> Iterator[None]:
    """Within the block, SIGTERM stops the job the way Ctrl-C does (main thread only)."""
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def resume_command(overrides: Sequence[str], job_dir: Path, sweep_dir: str = "", script: str = "run.py") -> str:
    """The command line that resumes this job (or its sweep) into the same dir; finished instances are skipped.

    The one resume command of cts: a job stopped by a signal (``sys.argv``) and a job
    that ended incomplete (:mod:`cts.outcome`, from Hydra's task overrides) both print it.

    Args:
        overrides: The arguments after the script (``hydra.run.dir``/``hydra.sweep.dir`` are replaced).
        job_dir: The job's output dir.
        sweep_dir: The multirun's sweep dir ("" for a single run): the command reruns the sweep.
        script: The script that started the job.
    """
    args = [a for a in overrides if not a.startswith(("hydra.run.dir=", "hydra.sweep.dir="))]
    where = f"hydra.sweep.dir={sweep_dir}" if sweep_dir else f"hydra.run.dir={job_dir}"
    return shlex.join(["python", script, *args, where])


@contextlib.contextmanager
def job_dir_lock(job_dir: Path) -> Iterator[None]:
    """Hold the job dir for this process; exit with a message when another process holds it."""
    job_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(job_dir / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise SystemExit(
            f"cts: another process is running a job in {job_dir}; wait for it to end, or use another dir."
        ) from None
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def interruptible_job(
    job_dir: Path, n_total: int, count_done: Callable[[], int], sweep_dir: str = ""
) -> Iterator[None]:
    """Run a job that SIGINT/SIGTERM stop with one line and a resume command.

    Args:
        job_dir: The job's output dir (locked for the duration).
        n_total: The number of instances the job was asked to run.
        count_done: Counts the finished instances in the job dir (called after the stop).
        sweep_dir: The multirun's sweep dir, if any (the resume command reruns the sweep).

    Raises:
        SystemExit: 130 after SIGINT, 143 after SIGTERM, with the message.
    """
    _received.clear()
    with job_dir_lock(job_dir), sigterm_as_sigint():
        try:
            yield
        except KeyboardInterrupt:
            signum = _received[0] if _received else signal.SIGINT
            name = signal.Signals(signum).name
            print(
                f"cts: stopped by {name}: {count_done()}/{n_total} instances done in {job_dir}; "
                f"resume with: {resume_command(sys.argv[1:], job_dir, sweep_dir, script=sys.argv[0])}",
                file=sys.stderr, flush=True,
            )
            raise SystemExit(128 + signum) from None
