"""Pipeline stages: a role's failure becomes a :class:`StageError` naming its stage and kind.

Invalid model output stays a result (``invalid_output``); failures of the
infrastructure (connection, auth, missing model, cache or disk errors) become
``infra``, which a resume retries; ``BudgetExceeded`` and ``CircuitOpen`` stop the job.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from cts.records import ErrorInfo, infra_exception
from cts.types import INFRA_CALL_KINDS, BudgetExceeded, CallError, CircuitOpen, UnscoredError


class StageError(Exception):
    """Wraps a failure with the pipeline stage it happened in."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(f"{info.stage}: {info.kind}: {info.message}")
        self.info = info


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Turn a role failure into a :class:`StageError` naming the stage.

    ``BudgetExceeded`` and ``CircuitOpen`` pass through untouched: they stop the job,
    not the instance. Call failures of the infrastructure (connection, auth, missing
    model, cache or disk errors) become kind ``infra``; invalid output stays a result.
    """
    try:
        yield
    except (BudgetExceeded, CircuitOpen, StageError, asyncio.CancelledError):
        raise
    except UnscoredError as e:
        raise StageError(ErrorInfo(name, e.kind, e.reason)) from e  # type: ignore[arg-type]
    except CallError as e:
        infra = e.kind in INFRA_CALL_KINDS
        raise StageError(ErrorInfo(name, "infra" if infra else "api_error", str(e), e.endpoint)) from e
    except Exception as e:
        kind = "infra" if infra_exception(e) else "exception"
        raise StageError(ErrorInfo(name, kind, f"{type(e).__name__}: {e}")) from e
