"""The pipeline's two settings: how each instance runs (:class:`InstanceSettings`) and how a job runs them (:class:`JobSettings`).

:func:`cts.protocol.pipeline.run_instances` takes the job's roles and these two objects, not a
keyword per value threaded from the task down to each instance.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from cts.core.contracts import Progress
from cts.core.records import Record
from cts.protocol.arms import ArmOutcome
from cts.protocol.design import PLAIN, Design
from cts.protocol.streaming import InstanceHook

OrigShare = Callable[[str, Callable[[], Awaitable[ArmOutcome]]], Awaitable[ArmOutcome]]
"""``share(key, work)``: an arm computed once for every job that shares it (the orig arm: key = instance id)."""
UsageScope = Callable[[], contextlib.AbstractContextManager[Mapping[str, Mapping[str, float]]]]
"""Opens the per-instance accounting of the LLM calls made inside it (:func:`cts.llm.usage_scope`)."""


@contextlib.contextmanager
def no_usage() -> Iterator[Mapping[str, Mapping[str, float]]]:
    """No accounting: every instance's usage is empty."""
    yield {}


def whole(record: Record) -> Record:
    """The record as committed (the default of :attr:`JobSettings.keep`)."""
    return record


@dataclass(frozen=True)
class InstanceSettings:
    """How each instance of a job runs.

    Attributes:
        k: The question budget.
        design: Repeats and attribution arms (:class:`cts.protocol.design.Design`; default: one run, no extra arm).
        orig_share: Computes the orig arm (and the attribution arms) once for all jobs of a sweep
            that share it (None = each job computes its own).
    """

    k: int
    design: Design = PLAIN
    orig_share: OrigShare | None = None


@dataclass(frozen=True)
class JobSettings:
    """How a job runs its instances: where records go, how many at once, what is metered, kept and shown.

    Attributes:
        out_dir: The job dir (``records.jsonl``, ``infra_failures.jsonl``).
        concurrency: Instances in flight at once.
        usage_scope: Per-instance accounting of the LLM calls (:data:`UsageScope`).
        models: Per role, the model id it calls (recorded with every instance).
        progress: Show this job's bar, or report to a shared :class:`Progress` (a sweep's bar).
        keep: What of each committed record the returned list holds (e.g. only what the metrics
            read; the file always has everything).
        on_instance: ``on_instance(instance, gold, record, traces)`` runs after each instance is
            committed (e.g. to log its MLflow trace); its failure is logged, never fatal.
    """

    out_dir: Path
    concurrency: int = 8
    usage_scope: UsageScope = no_usage
    models: Mapping[str, str] | None = None
    progress: bool | Progress = True
    keep: Callable[[Record], Record] = whole
    on_instance: InstanceHook | None = None
