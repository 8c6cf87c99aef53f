"""Pipeline stages: a role's failure becomes a :class:`StageError` naming its stage and kind;
a :class:`StageClock` records when each stage ran.

Invalid model output stays a result (``invalid_output``); failures of the
infrastructure (connection, auth, missing model, cache or disk errors) become
``infra``, which a resume retries; ``SpendLimitReached`` and ``CircuitOpen`` stop the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

from cts.core.records import ErrorInfo, infra_exception
from cts.core.types import (
    INFRA_CALL_KINDS,
    CallError,
    CircuitOpen,
    ErrorKind,
    SpendLimitReached,
    UnscoredError,
)

T = TypeVar("T")
_EPOCH_NS = time.time_ns() - time.perf_counter_ns()  # one anchor per process: every clock agrees


class StageError(Exception):
    """Wraps a failure with the pipeline stage it happened in."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(f"{info.stage}: {info.kind}: {info.message}")
        self.info = info


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Turn a role failure into a :class:`StageError` naming the stage.

    ``SpendLimitReached`` and ``CircuitOpen`` pass through untouched: they stop the job,
    not the instance. Call failures of the infrastructure (connection, auth, missing
    model, cache or disk errors) become kind ``infra``; invalid output stays a result.
    """
    try:
        yield
    except (SpendLimitReached, CircuitOpen, StageError, asyncio.CancelledError):
        raise
    except UnscoredError as e:
        raise StageError(ErrorInfo(name, e.kind, e.reason)) from e
    except CallError as e:
        infra = e.kind in INFRA_CALL_KINDS
        raise StageError(ErrorInfo(name, "infra" if infra else "api_error", str(e), e.endpoint)) from e
    except Exception as e:
        kind: ErrorKind = "infra" if infra_exception(e) else "exception"
        raise StageError(ErrorInfo(name, kind, f"{type(e).__name__}: {e}")) from e


class StageClock:
    """When each stage of one instance started and ended, recorded as it happens.

    The pipeline carries one clock per instance (and one per arm, which a sweep may
    share between jobs); the per-instance trace is built from these times, so a span
    shows how long its stage took, not how long logging it took. Times are epoch
    nanoseconds, taken from the monotonic clock (a wall-clock step cannot reorder them).
    """

    def __init__(self) -> None:
        self.start_ns = self.now_ns()
        self.spans: list[dict[str, Any]] = []
        """``{"stage", "start_ns", "end_ns"}`` per timed stage, in the order they ended (JSON-ready)."""

    @staticmethod
    def now_ns() -> int:
        """The current time in epoch nanoseconds, read from the monotonic clock."""
        return _EPOCH_NS + time.perf_counter_ns()

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Record the block as the span ``name`` (also when it raises)."""
        start = self.now_ns()
        try:
            yield
        finally:
            self.spans.append({"stage": name, "start_ns": start, "end_ns": self.now_ns()})

    @contextlib.contextmanager
    def stage(self, name: str, span: str | None = None) -> Iterator[None]:
        """:func:`stage` ``name``, timed as the span ``span`` (default: the stage's name)."""
        with self.timed(span or name), stage(name):
            yield

    async def call(self, name: str, work: Awaitable[T]) -> T:
        """Await ``work``, timed as the span ``name`` (e.g. one of several calls gathered in one stage)."""
        with self.timed(name):
            return await work
