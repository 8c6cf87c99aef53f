"""Stopping a job by a signal: one clean line, a resumable job dir, no tracebacks.

SIGTERM is turned into SIGINT, so both take the same path: inside ``asyncio.run``
the event loop cancels the job (the pipeline's ``finally`` cancels in-flight
instances and closes the record files, every finished record already flushed);
elsewhere Python raises KeyboardInterrupt. :func:`cts.tracking.open_mlflow_run` ends the
MLflow run ``KILLED`` on the way out, and :func:`interruptible_job` prints how many
instances are done and the exact command that resumes the job, then exits
128 + the signal number.

SIGKILL cannot be caught: the job dir keeps its records and the MLflow run id
(``mlflow_run.json``), and a resume into the same dir continues that run.

A job dir is also locked while a job runs in it, so two processes never append to
the same records or update the same run.

The resume command works from any directory: the Python that ran the job, the
absolute path of the script, every argument shell-quoted and the dir Hydra-quoted.
A job of a multirun resumes with its sweep's command (the same sweep plus
``hydra.sweep.dir=<abs dir>``), recorded once by the launching process with the sweep
(:mod:`cts._util.launch`) for every job, in-process or in a launcher's worker. A
launcher that runs every job of the sweep in its own process says it once for all
of them (:func:`sweep_signals`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType

from filelock import FileLock, Timeout

from cts._util.launch import Launch, current_launch, sweep_record
from cts._util.secrets import masked_overrides, redact
from cts.core.errors import Interrupted, JobDirLocked

LOCK_FILE = ".cts.lock"
_DIR_KEYS = ("hydra.run.dir", "hydra.sweep.dir")
_HYDRA_PLAIN = re.compile(r"[A-Za-z0-9_/.\-+:@%]+")  # a value Hydra's override grammar reads unquoted, as is
_received: list[int] = []  # SIGTERM seen by this process's handler (signals are process-wide)


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


def stop_signal() -> int:
    """The signal that stopped the job or sweep: SIGTERM when one was received, else SIGINT."""
    return _received[0] if _received else int(signal.SIGINT)


@contextlib.contextmanager
def sweep_signals(launch: Launch) -> Iterator[None]:
    """A launcher running every job of ``launch`` in this process (main thread): SIGTERM as SIGINT.

    The signal is kept for the whole sweep (:func:`stop_signal`), and jobs stopped in the block
    print no resume command (``launch.stop_announced``): the launcher prints the sweep's, once.
    """
    _received.clear()
    launch.stop_announced = True
    try:
        with sigterm_as_sigint():
            yield
    finally:
        launch.stop_announced = False


def hydra_quote(value: str) -> str:
    """``value`` as Hydra's override grammar reads it back unchanged: quoted when it holds ``=``, ``,``, spaces ..."""
    if _HYDRA_PLAIN.fullmatch(value):
        return value
    quote = '"' if '"' not in value else "'"

    def escaped(m: re.Match[str]) -> str:  # backslashes before a quote (or the closing one) are doubled
        return m.group(1) * 2 + ("\\" + quote if m.group(2) else "")

    return quote + re.sub(rf"(\\*)({quote}|$)", escaped, value) + quote


def entry_script() -> str:
    """The absolute path of the script that started this process (``run.py``)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else "run.py")
    return os.path.abspath(path)


def resume_command(overrides: Sequence[str], job_dir: Path, sweep_dir: str = "", script: str | None = None) -> str:
    """The command line that resumes this job (or its sweep) into the same dir; finished instances are skipped.

    The one resume command of cts: a job stopped by a signal (``sys.argv``), a job that
    ended incomplete (:mod:`cts.protocol.outcome`) and a stopped sweep print it. It runs from any
    directory: this process's Python, the script's absolute path, the dir absolute.

    A key given on the command line is masked (``***``): the command is printed and saved in files.

    Args:
        overrides: The arguments after the script (``hydra.run.dir``/``hydra.sweep.dir`` are replaced).
        job_dir: The job's output dir.
        sweep_dir: The multirun's sweep dir ("" for a single run): the command reruns the sweep,
            as the launching process recorded it (:mod:`cts._util.launch`) when it is this sweep.
        script: The script that started the job (default: :func:`entry_script`).
    """
    recorded = recorded_sweep(sweep_dir) if sweep_dir else None
    if recorded is not None:
        return recorded
    args = [_masked(a) for a in overrides if a.lstrip("+~").split("=", 1)[0] not in _DIR_KEYS]
    if sweep_dir and not {"-m", "--multirun"} & set(args):
        args.insert(0, "-m")
    key, where = ("hydra.sweep.dir", sweep_dir) if sweep_dir else ("hydra.run.dir", str(job_dir))
    pinned = f"{key}={hydra_quote(os.path.abspath(where))}"
    return shlex.join([sys.executable, os.path.abspath(script) if script else entry_script(), *args, pinned])


def _masked(arg: str) -> str:
    """A command-line argument with a key given in it masked (the command is printed and saved)."""
    if arg.startswith("-") or "=" not in arg:
        return arg
    try:
        return masked_overrides([arg])[0]
    except Exception:  # noqa: BLE001 - not an override Hydra parses: masked by its text alone
        return redact(arg)


def recorded_sweep(sweep_dir: str) -> str | None:
    """The resume command the launching process recorded for the sweep in ``sweep_dir`` (None if none)."""
    record = sweep_record(sweep_dir) if sweep_dir else None
    return record.resume if record is not None and record.resume else None


@contextlib.contextmanager
def job_dir_lock(job_dir: Path) -> Iterator[None]:
    """Hold the job dir for this process; refuse with a message when another process holds it."""
    job_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(job_dir / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise JobDirLocked(
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

    Within :func:`sweep_signals` the line has no command (the sweep prints one for every job).

    Args:
        job_dir: The job's output dir (locked for the duration).
        n_total: The number of instances the job was asked to run.
        count_done: Counts the finished instances in the job dir (called after the stop).
        sweep_dir: The multirun's sweep dir, if any (the resume command reruns the sweep).

    Raises:
        Interrupted: Exit status 130 after SIGINT, 143 after SIGTERM, the line printed.
    """
    launch = current_launch()
    announced = launch is not None and launch.stop_announced  # the launcher keeps the signal for every job
    if not announced:
        _received.clear()
    with job_dir_lock(job_dir), sigterm_as_sigint():
        try:
            yield
        except KeyboardInterrupt:
            signum = stop_signal()
            name = signal.Signals(signum).name
            line = f"cts: stopped by {name}: {count_done()}/{n_total} instances done in {job_dir}"
            if not announced:
                line += f"; resume with: {resume_command(sys.argv[1:], job_dir, sweep_dir)}"
            print(line, file=sys.stderr, flush=True)
            raise Interrupted(exit_code=128 + signum) from None
