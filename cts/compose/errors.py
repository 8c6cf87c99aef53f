"""Bad input ends a job with one clean line per problem and exit code 1.

A user who passes a broken dataset, a missing gold file or an unset mandatory key
needs to read what is wrong, not a traceback. Only the errors that describe the
user's input are turned into messages; any other exception is a bug and keeps its
traceback. Debug output (the traceback) is asked for with ``debug=true`` or
``HYDRA_FULL_ERROR=1``. An output that cannot be written (disk full, read-only, no
permission: :func:`cts._util.io.output_fault`) is not a bug either: one line names the path.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import logging
import os
import re
import sys
import traceback
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

from cts._util.io import UnwritableOutput, output_fault
from cts.core.errors import ConfigError
from cts.data.jsonl import DatasetError
from cts.gold import GoldError

__all__ = [
    "InputError",
    "debug_requested",
    "error_lines",
    "input_errors",
    "missing_values",
    "problems_of",
    "one_line_composition_errors",
    "quiet_unwritable_logs",
    "refuse",
    "stop_unwritable",
    "user_error_in",
]

DEBUG_HINT = "(for a traceback: debug=true or HYDRA_FULL_ERROR=1)"


class InputError(ValueError):
    """The configuration or the user's files cannot be used; ``problems`` lists each one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


USER_ERRORS: tuple[type[BaseException], ...] = (
    InputError,
    DatasetError,
    GoldError,
    FileNotFoundError,
    FileExistsError,
    MissingMandatoryValue,
    InterpolationResolutionError,
)


def debug_requested(cfg: DictConfig | None = None) -> bool:
    """Whether the user asked for tracebacks (``HYDRA_FULL_ERROR=1`` or ``debug=true``)."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        return True
    return bool(cfg is not None and OmegaConf.select(cfg, "debug", default=False))


def problems_of(error: BaseException) -> list[str]:
    """The user-facing problem lines of one input error (one line each)."""
    if isinstance(error, OSError) and output_fault(error) is error:
        return [_output_problem(error)]
    if isinstance(error, (MissingMandatoryValue, InterpolationResolutionError)):
        key = getattr(error, "full_key", "") or "config"
        if isinstance(error, MissingMandatoryValue):
            return [f"{key}: missing mandatory value; set it on the command line: {key}=..."]
        return [f"{key}: {str(error).splitlines()[0]}"]
    found = getattr(error, "problems", None)
    lines = [str(p) for p in found] if found else [str(error)]
    return [" ".join(line.split("\n")) for line in lines]


def _output_problem(error: OSError) -> str:
    reason = error.strerror or str(error)
    if error.filename is None:
        return f"the job's outputs cannot be written: {reason}"
    what = "cannot be written: " if isinstance(error, UnwritableOutput) else ""
    return f"{error.filename}: {what}{reason}"


def error_lines(problems: list[str]) -> str:
    """The ``error: ...`` lines of these problems (each one line, duplicates dropped)."""
    return "\n".join(f"error: {' '.join(p.splitlines())}" for p in dict.fromkeys(problems))


@contextlib.contextmanager
def one_line_composition_errors() -> Iterator[None]:
    """Refuse (exit 1) with one ``error:`` line when Hydra cannot compose a job (a typo'd key or option).

    A sweep composes every job before it starts (:func:`cts.compose.launch.jobs.sweep_job_configs`): a
    typo in a swept value would otherwise end in Hydra's message of 9-40 lines after the sweep dir exists.
    """
    from hydra.errors import ConfigCompositionException, MissingConfigException

    try:
        yield
    except (ConfigCompositionException, MissingConfigException) as e:
        raise ConfigError(error_lines([composition_problem(e)])) from None


def composition_problem(error: Exception) -> str:
    """One line for Hydra's composition error: ``concurency: no such key``, ``clarifier=x: no such option ...``."""
    text = f"{error}\n{error.__cause__ or ''}"  # Hydra's cause (OmegaConf's) says what is missing
    if (found := re.search(r"Could not override '([^']+)'", text)) and re.search(r"Key '[^']+' (is )?not in", text):
        from cts.compose.validate import declared_names, no_such_key

        key = found.group(1)
        return no_such_key(key, declared_names(key.rpartition(".")[0]))
    if found := re.search(r"Could not find '([^']+)/([^'/]+)'", text):
        group, option = found.groups()
        options = re.findall(r"(?m)^\t(\S+)$", text)
        close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        return f"{group.replace('/', '.')}={option}: no such option ({hint}options: {', '.join(options)})"
    return " ".join(text.split("\n", 1)[0].split())


def refuse(problems: list[str]) -> None:
    """Refuse (exit 1) with one ``error:`` line per problem, when there are any (nothing has been created yet)."""
    if problems:
        raise ConfigError(error_lines(problems))


def stop_unwritable(fault: OSError, job_dir: Path, instances: Sequence[Any], resume: str, *, multirun: bool) -> None:
    """End a job whose outputs cannot be written: the ``error:`` line, then what finished and the resume line.

    Returns when no instance finished: the caller raises ``fault``, which :func:`input_errors` says in one line.

    Raises:
        TaskStopped: A single run (``JobIncomplete`` in a multirun), after the lines.
    """
    from tqdm import tqdm

    from cts.protocol.outcome import Outcome, finish
    from cts.tasks.evaluate import count_done

    try:
        n_done = count_done(job_dir, instances)
    except OSError:  # not even readable: the one line is all there is to say
        n_done = 0
    if n_done == 0:
        return
    tqdm.write(error_lines(problems_of(fault)), file=sys.stderr)  # above a sweep's progress bar, not glued to it
    finish(Outcome("infra", len(instances), n_done, ()), [], job_dir, resume, multirun=multirun)


def missing_values(cfg: DictConfig, exclude: Collection[str] = ()) -> list[str]:
    """Every mandatory key (``???``) left unset, as problem lines (checked before anything runs).

    Args:
        cfg: The config.
        exclude: Top-level keys not to look into (``hydra``), instead of a masked copy of the rest.
    """
    found = _missing(cfg, "", exclude)
    return [f"{key}: missing mandatory value; set it on the command line: {key}=..." for key in found]


def _missing(node: DictConfig | ListConfig, prefix: str, exclude: Collection[str] = ()) -> list[str]:
    """Keys set to ``???``, walked without resolving interpolations (which may point at them)."""
    out: list[str] = []
    keys: Iterable[Any] = node.keys() if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        if key in exclude:
            continue
        name = f"{prefix}{key}"
        if OmegaConf.is_missing(node, key):
            out.append(name)
        elif not OmegaConf.is_interpolation(node, key):
            child = node[key]
            if isinstance(child, (DictConfig, ListConfig)):
                out += _missing(child, f"{name}.")
    return out


@contextlib.contextmanager
def input_errors(cfg: DictConfig | None = None, *, exit_in_debug: bool = False) -> Iterator[None]:
    """Refuse (exit 1) with one ``error:`` line per problem when the block fails on bad input.

    Args:
        exit_in_debug: With debug output requested, print the traceback and still exit
            with the lines (for a Hydra callback, where Hydra would only warn of an exception).

    Raises:
        ConfigError: With the lines, unless debug output was requested (then the
            original exception propagates with its traceback).
    """
    try:
        yield
    except Exception as e:
        cause = user_error_in(e)
        if cause is None:
            raise
        debug = debug_requested(cfg)
        if debug and (exit_in_debug or os.environ.get("HYDRA_FULL_ERROR") != "1"):  # else Hydra prints it
            traceback.print_exc()
        if debug and not exit_in_debug:
            raise
        raise ConfigError(f"{error_lines(problems_of(cause))}\n{DEBUG_HINT}") from None


def user_error_in(error: BaseException) -> BaseException | None:
    """The input error itself, or the one wrapped by e.g. Hydra's ``InstantiationException``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, USER_ERRORS):
            return current
        seen.add(id(current))
        current = current.__cause__  # explicit wrapping only: a bug raised while handling input stays a bug
    return output_fault(error)


def quiet_unwritable_logs() -> None:
    """Make a log file that stops being writable (disk full) say so once, not print a traceback per log line.

    Applies to the file handlers of the root logger (Hydra's ``<job dir>/<task>.log``);
    any other logging error is reported as usual.
    """
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and not isinstance(handler.handleError, functools.partial):
            handler.handleError = functools.partial(_log_file_failed, handler)  # type: ignore[method-assign]  # this handler's own


def _log_file_failed(handler: logging.FileHandler, record: logging.LogRecord) -> None:
    error = sys.exc_info()[1]
    if error is None or output_fault(error) is None:
        logging.FileHandler.handleError(handler, record)
        return
    handler.setLevel(logging.CRITICAL + 1)  # silenced, not removed: the logger may be iterating its handlers
    reason = getattr(error, "strerror", None) or error
    print(
        f"warning: {handler.baseFilename}: the log cannot be written ({reason}); nothing more is logged there",
        file=sys.stderr,
        flush=True,
    )
