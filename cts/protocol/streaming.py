"""How a job streams its instances: commit each as it finishes, show progress, stop on the spend limit or a breaker.

Moved out of :mod:`cts.protocol.pipeline` (which runs them) so that it stays one screenful per idea.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

from cts.core.contracts import Progress
from cts.core.records import Record
from cts.core.types import CircuitOpen, Gold, Instance, RequestRejected, SpendLimitReached
from cts.llm import calls_in_flight
from cts.protocol.job_files import JobSink

log = logging.getLogger(__name__)

RecordKey = tuple[str, int]
"""What a job finishes once: (instance id, repeat)."""


def record_key(record: Record) -> RecordKey:
    """The (instance id, repeat) a record finishes."""
    return record.id, record.repeat


CALLS_EVERY_S = 1.0
"""How often the progress bar's LLM calls in flight are refreshed."""


async def show_calls(bar: Any, shared: Progress | None) -> None:
    """Until cancelled, show the requests in flight on ``shared`` or, without one, on the job's ``bar``.

    A stuck call shows as an age that keeps growing while no instance finishes.
    """
    while True:
        await asyncio.sleep(CALLS_EVERY_S)
        in_flight = calls_in_flight()
        if shared is not None:
            shared.calls(in_flight)
        else:
            bar.set_postfix(in_flight.postfix())


def advancing(
    shared: Progress, hook: Callable[[Record, list[dict[str, Any]]], None] | None
) -> Callable[[Record, list[dict[str, Any]]], None]:
    """``hook``, after telling a shared progress display that an instance was committed."""

    def commit(record: Record, traces: list[dict[str, Any]]) -> None:
        shared.advance(record)
        if hook is not None:
            hook(record, traces)

    return commit


async def drain(
    results: AsyncGenerator[tuple[Record, list[dict[str, Any]]], None],
    sink: JobSink,
    finished: dict[RecordKey, Record],
    bar: Any,
    keep: Callable[[Record], Record],
    on_commit: Callable[[Record, list[dict[str, Any]]], None] | None = None,
) -> str:
    """Commit instances as they finish; the stop reason (see :func:`cts.protocol.pipeline.run_instances`)."""
    try:
        async with contextlib.aclosing(results) as finishing:  # closing cancels the instances still running
            async for record, traces in finishing:
                if sink.write(record, traces):
                    finished[record_key(record)] = keep(record)
                    bar.update(1)
                    if on_commit is not None:
                        on_commit(record, traces)
    except SpendLimitReached as e:
        log.warning("spend limit reached, stopping cleanly (finished records kept): %s", e)
        return e.kind
    except CircuitOpen as e:  # an open breaker, or a request the provider rejects (RequestRejected)
        log.error("%s, stopping cleanly (finished records kept): %s", e.kind, e)
        failure = {"id": None, "stage": "", "kind": e.kind, "message": str(e), "endpoint": e.endpoint}
        sink.write_failure({**failure, **({"role": e.role} if isinstance(e, RequestRejected) else {})})
        return e.kind
    return "infra" if sink.n_infra else "done"


InstanceHook = Callable[[Instance, Gold, Record, list[dict[str, Any]]], Any]


def call_hook(hook: InstanceHook, instance: Instance, gold: Gold, record: Record, traces: list[dict[str, Any]]) -> None:
    try:
        hook(instance, gold, record, traces)
    except Exception:  # noqa: BLE001 - observability must not stop the job
        log.exception("per-instance hook failed for %s", record.id)
