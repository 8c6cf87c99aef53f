"""One family of cts errors: raised where a problem is found, turned into an exit in one place.

Library code never ends the process. It raises a :class:`CtsError` whose message is what the user
reads (one ``error:`` line, or a short block naming the fix) and whose ``exit_code`` is the status
the command ends with. Only the entry points turn it into an exit, all through :func:`exit_on_error`:
``run.py`` around the task, :class:`cts.compose.callbacks.LaunchCallbacks` around each Hydra hook
(Hydra turns a callback's exception into a warning), and the ``python -m cts.*`` CLIs
(:func:`run_cli`). Anything that is not a :class:`CtsError` is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import NoReturn

__all__ = [
    "ConfigError",
    "CtsError",
    "Interrupted",
    "JobDirLocked",
    "LaunchDone",
    "PlanRefused",
    "PreflightFailed",
    "ReportFailed",
    "ResumeRefused",
    "ScoredTooLittle",
    "TaskStopped",
    "TrackingStoreError",
    "exit_on_error",
    "run_cli",
]


class CtsError(Exception):
    """A problem the user can fix, said in their words; the command ends with ``exit_code``.

    Attributes:
        message: What the user reads (printed to stderr); empty when it was printed already.
        exit_code: The process's exit status (1 unless a subclass or the raiser says otherwise).
    """

    exit_code: int = 1

    def __init__(self, message: str = "", *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(CtsError):
    """A config value, command line or input file cannot be used (nothing was created)."""


class PreflightFailed(CtsError):
    """A key, endpoint or request of the run failed the pre-flight (nothing was run)."""


class ResumeRefused(CtsError):
    """A job dir holds records of another protocol configuration (its fingerprint differs)."""


class JobDirLocked(CtsError):
    """Another process is running a job in the same job dir."""


class TrackingStoreError(CtsError):
    """The tracking store cannot be opened; the message says how to recover."""


class PlanRefused(CtsError):
    """The plan refused the sweep: its calibration slice failed, or it may cost more than the spend limit."""


class TaskStopped(CtsError):
    """A single run ended incomplete (infrastructure failure, breaker, spend limit, partial gold)."""


class ScoredTooLittle(CtsError):
    """A run ran to its end but measured too few scores (``min_scored``, :mod:`cts.compose.scored`): exit 3."""

    exit_code = 3


class ReportFailed(CtsError):
    """The sweep report could not be built, or misses some of the sweep's jobs."""


class Interrupted(CtsError):
    """SIGINT or SIGTERM stopped a job (its line already printed); exit 128 + the signal's number."""


class LaunchDone(CtsError):
    """The launch did all it was asked before the jobs (``plan=only``): exit 0, nothing more to say."""

    exit_code = 0


def _exit(error: CtsError) -> NoReturn:
    """End the process for ``error``: its message on stderr, its exit status (the one place cts exits)."""
    if error.message and error.exit_code == 1:
        raise SystemExit(error.message) from None  # Python prints it, exit status 1
    if error.message:
        print(error.message, file=sys.stderr, flush=True)
    raise SystemExit(error.exit_code) from None


@contextlib.contextmanager
def exit_on_error() -> Iterator[None]:
    """Turn a :class:`CtsError` raised in the block into its message and exit status (entry points only)."""
    try:
        yield
    except CtsError as e:
        _exit(e)


def run_cli(main: Callable[[], int | None]) -> NoReturn:
    """Run a ``python -m cts.<tool>`` entry point: its return value is the exit status; errors exit too."""
    with exit_on_error():
        status = main()
    _exit(CtsError(exit_code=status or 0))
