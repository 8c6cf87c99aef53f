"""Bad input ends a job with one clean line per problem and exit code 1.

A user who passes a broken dataset, a missing gold file or an unset mandatory key
needs to read what is wrong, not a traceback. Only the errors that describe the
user's input are turned into messages; any other exception is a bug and keeps its
traceback. Debug output (the traceback) is asked for with ``debug=true`` or
``HYDRA_FULL_ERROR=1``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Iterator

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

from cts.data import DatasetError
from cts.gold import GoldError

__all__ = ["InputError", "debug_requested", "input_errors", "missing_values", "problems_of", "user_error_in"]

DEBUG_HINT = "(for a traceback: debug=true or HYDRA_FULL_ERROR=1)"


class InputError(ValueError):
    """The configuration or the user's files cannot be used; ``problems`` lists each one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


USER_ERRORS: tuple[type[BaseException], ...] = (
    InputError, DatasetError, GoldError, FileNotFoundError, FileExistsError,
    MissingMandatoryValue, InterpolationResolutionError,
)


def debug_requested(cfg: DictConfig | None = None) -> bool:
    """Whether the user asked for tracebacks (``HYDRA_FULL_ERROR=1`` or ``debug=true``)."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        return True
    return bool(cfg is not None and OmegaConf.select(cfg, "debug", default=False))


def problems_of(error: BaseException) -> list[str]:
    """The user-facing problem lines of one input error (one line each)."""
    if isinstance(error, (MissingMandatoryValue, InterpolationResolutionError)):
        key = getattr(error, "full_key", "") or "config"
        if isinstance(error, MissingMandatoryValue):
            return [f"{key}: missing mandatory value; set it on the command line: {key}=..."]
        return [f"{key}: {str(error).splitlines()[0]}"]
    found = getattr(error, "problems", None)
    lines = [str(p) for p in found] if found else [str(error)]
    return [" ".join(line.split("\n")) for line in lines]


def missing_values(cfg: DictConfig) -> list[str]:
    """Every mandatory key (``???``) left unset, as problem lines (checked before anything runs)."""
    return [f"{key}: missing mandatory value; set it on the command line: {key}=..." for key in _missing(cfg, "")]


def _missing(node: DictConfig | ListConfig, prefix: str) -> list[str]:
    """Keys set to ``???``, walked without resolving interpolations (which may point at them)."""
    out: list[str] = []
    keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        name = f"{prefix}{key}"
        if OmegaConf.is_missing(node, key):
            out.append(name)
        elif not OmegaConf.is_interpolation(node, key):
            child = node[key]
            if isinstance(child, (DictConfig, ListConfig)):
                out += _missing(child, f"{name}.")
    return out


@contextlib.contextmanager
def input_errors(cfg: DictConfig | None = None) -> Iterator[None]:
    """Exit 1 with one ``error:`` line per problem when the block fails on bad input.

    Raises:
        SystemExit: With the message, unless debug output was requested (then the
            original exception propagates with its traceback).
    """
    try:
        yield
    except Exception as e:
        cause = user_error_in(e)
        if cause is None:
            raise
        if debug_requested(cfg):
            if os.environ.get("HYDRA_FULL_ERROR") != "1":  # else Hydra prints the full trace itself
                traceback.print_exc()
            raise
        lines = "\n".join(f"error: {p}" for p in problems_of(cause))
        sys.exit(f"{lines}\n{DEBUG_HINT}")


def user_error_in(error: BaseException) -> BaseException | None:
    """The input error itself, or the one wrapped by e.g. Hydra's ``InstantiationException``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, USER_ERRORS):
            return current
        seen.add(id(current))
        current = current.__cause__  # explicit wrapping only: a bug raised while handling input stays a bug
    return None
