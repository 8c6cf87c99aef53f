"""The LLM spend limit of one job dir: spend so far, what no record holds, how much is missing.

A job dir's spend is the cost booked in its records plus a small ledger
(``spend.jsonl``) of what was paid for instances that never got a record: calls
in flight when the spend limit stopped the job, and calls of instances it stopped
mid-way. Each row books the USD and the requests and tokens behind it. ``services.llm.spend.max_usd`` caps that total across every run into
the dir, so a resume with the same cap does not spend it again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cts._util.io import append_line
from cts.core.records import Record, read_records
from cts.core.types import SpendLimitReached

log = logging.getLogger(__name__)

RECORDS_FILE = "records.jsonl"
SPEND_FILE = "spend.jsonl"
_EPS = 1e-12

JobResult = tuple[list[Record], str]


def recorded_spend(records: Iterable[Record]) -> float:
    """USD booked in ``records`` (every role's ``cost_usd``)."""
    return _total(_usage_rows(records), "cost_usd")


def unrecorded_spend(job_dir: Path) -> float:
    """USD paid in ``job_dir`` for instances without a record (the ledger's total)."""
    return unrecorded_usage(job_dir)["usd"]


UNRECORDED_KEYS = ("requests", "tokens_in", "tokens_out", "tokens_reasoning")
"""The usage counts a ledger row books beside its USD (``unrecorded``)."""


def unrecorded_usage(job_dir: Path, skip: int = 0) -> dict[str, float]:
    """Requests, tokens and USD paid in ``job_dir`` for instances without a record.

    Args:
        job_dir: The job dir.
        skip: Ledger rows to leave out (those written before a run started).

    Returns:
        Each of :data:`UNRECORDED_KEYS` and ``usd``, summed over the ledger's rows after
        the first ``skip`` (rows written before the counts were booked count only their USD).
    """
    totals = dict.fromkeys((*UNRECORDED_KEYS, "usd"), 0.0)
    for row in _ledger_rows(Path(job_dir))[skip:]:
        totals["usd"] += float(row["unrecorded_usd"])
        counts = row.get("unrecorded") or {}
        for key in UNRECORDED_KEYS:
            totals[key] += float(counts.get(key, 0.0))
    return totals


def count_ledger_rows(job_dir: Path) -> int:
    """How many rows the ledger of ``job_dir`` holds (0 without one)."""
    return len(_ledger_rows(Path(job_dir)))


def _ledger_rows(job_dir: Path) -> list[dict[str, Any]]:
    path = job_dir / SPEND_FILE
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            float(row["unrecorded_usd"])
        except (ValueError, KeyError, TypeError):
            continue  # a line torn by a killed process
        rows.append(row)
    return rows


def spent_so_far(job_dir: Path) -> float:
    """USD spent by every earlier run into ``job_dir``: its records plus the ledger."""
    return recorded_spend(read_records(Path(job_dir) / RECORDS_FILE)) + unrecorded_spend(job_dir)


@dataclass(frozen=True)
class SpendLimit:
    """The job's LLM spend limit (``services.llm``), given by the composition layer.

    Attributes:
        max_usd: The cap over every run into the job dir (``spend.max_usd``; None = no cap).
        timeout_s: How long in-flight requests may settle at the end (``timeout_s``).
        count_prior_spend: Tells the LLM runtime what earlier runs into the dir (the second
            argument) spent; the jobs of a sweep share one runtime, whose cap covers their sum.
    """

    max_usd: float | None
    timeout_s: float
    count_prior_spend: Callable[[float, str], None]


def run_within_spend_limit(
    job: Callable[[], Coroutine[Any, Any, JobResult]], job_dir: Path, limit: SpendLimit
) -> JobResult:
    """Run one job's coroutine under the job dir's spend limit and book what no record holds.

    Args:
        job: Builds the job's coroutine (``cts.protocol.pipeline.run_instances(...)``).
        job_dir: The job dir (records and ledger).
        limit: The cap and the runtime's prior-spend hook.

    Returns:
        What the job returned: all records and the stop reason.
    """
    with within_spend_limit(job, job_dir, limit) as pending:
        return pending.result()


class SpendLimitedJob:
    """A job's coroutine started under its spend limit (see :func:`within_spend_limit`)."""

    def __init__(self, job: Callable[[], Coroutine[Any, Any, JobResult]], job_dir: Path, limit: SpendLimit) -> None:
        from cts.llm import settled, usage_scope
        from cts.sweep import start_async

        self.job_dir = Path(job_dir)
        self._n_before, self._before = _count_and_spend(self.job_dir / RECORDS_FILE)
        if limit.max_usd is not None:
            limit.count_prior_spend(self._before + unrecorded_spend(self.job_dir), str(self.job_dir.resolve()))

        async def started() -> JobResult:  # job() runs only now: a failed set-up leaves no unawaited coroutine
            return await settled(job(), limit.timeout_s)

        with usage_scope() as usage:  # the started coroutine keeps counting into ``usage`` after the block
            self._started = start_async(started())  # the sweep's loop under hydra/launcher=cts
        self._usage = usage
        self._done = False

    def result(self) -> JobResult:
        """Wait for the job; book what it paid for instances without a record; return records and stop reason."""
        try:
            records, stop = self._started.result()
        finally:
            self._done = True  # a stopped sweep (KeyboardInterrupt) is not cancelled or booked again
        self._book(stop)
        return records, stop

    def cancel(self, reason: str) -> None:
        """Stop a job that has not been waited for (its set-up failed) and book what it paid."""
        if self._done:
            return
        self._done = True
        self._started.cancel()
        self._book(reason)

    def _book(self, stop: str) -> None:
        # One record at a time: a list of the dir's records is about 7 KB an instance (134 MB at 20,000).
        recorded = list(_usage_rows(itertools.islice(read_records(self.job_dir / RECORDS_FILE), self._n_before, None)))
        paid = self._usage.values()
        orphan = _total(paid, "cost_usd") - _total(recorded, "cost_usd")
        if orphan > _EPS:
            log.warning(
                "%.6f USD paid for instances without a record (in flight at the stop); booked in %s", orphan, SPEND_FILE
            )
            counts = {key: _total(paid, key) - _total(recorded, key) for key in UNRECORDED_KEYS}
            row = {"unrecorded_usd": orphan, "unrecorded": counts, "stop_reason": stop, "time": time.time()}
            _append(self.job_dir / SPEND_FILE, row)


def _count_and_spend(path: Path) -> tuple[int, float]:
    """How many records ``path`` holds and the USD they book (:func:`recorded_spend`), one record at a time."""
    n, usd = 0, 0.0
    for record in read_records(path):
        n += 1
        for row in record.usage.values():
            usd += float(row.get("cost_usd", 0.0))
    return n, usd


def _usage_rows(records: Iterable[Record]) -> Iterator[Mapping[str, Any]]:
    """Every role's usage row of ``records``."""
    return (u for r in records for u in r.usage.values())


def _total(rows: Iterable[Mapping[str, Any]], key: str) -> float:
    return sum(float(row.get(key, 0.0)) for row in rows)


@contextlib.contextmanager
def within_spend_limit(
    job: Callable[[], Coroutine[Any, Any, JobResult]], job_dir: Path, limit: SpendLimit
) -> Iterator[SpendLimitedJob]:
    """Start one job's coroutine under the job dir's spend limit; the block sets up the rest, then waits.

    In a sweep session the coroutine runs on the shared loop from here on, so the
    job's first requests go out while the block still sets up (its MLflow run);
    elsewhere it runs when the block calls ``result()``. A block that raises
    before ``result()`` stops the job, and what it paid is booked in the ledger.

    Yields:
        The started job: ``result()`` waits for it and returns records and stop reason.
    """
    pending = SpendLimitedJob(job, job_dir, limit)
    try:
        yield pending
    except BaseException:
        pending.cancel("setup_failed")
        raise
    else:
        pending.cancel("not_awaited")  # a block that forgot result(): nothing runs on unseen


def _append(path: Path, row: Mapping[str, Any]) -> None:
    append_line(path, json.dumps(row) + "\n")  # one write: never a torn line (cts._util.io.LineFile)


def spend_metrics(
    job_dir: Path, records: Iterable[Record], n_planned: int, on_disk: Iterable[Record] | None = None
) -> dict[str, float]:
    """How complete the job is and what its dir cost in total.

    ``on_disk``: every record of the job dir, if already read (else they are read here).

    Returns:
        ``n_planned`` (instances the job was asked to run), ``n_missing`` (those
        without a record, e.g. after a spend-limit stop), ``cost_unrecorded_usd`` (paid
        for instances without a record) and ``cost_total_usd`` (every record of
        the dir plus that: the figure ``spend.max_usd`` caps).
    """
    n_done = sum(1 for _ in records)
    return {
        "n_planned": float(n_planned),
        "n_missing": float(n_planned - n_done),
        "cost_unrecorded_usd": unrecorded_spend(job_dir),
        "cost_total_usd": spent_so_far(job_dir)
        if on_disk is None
        else recorded_spend(on_disk) + unrecorded_spend(job_dir),
    }


def stop_note(stop: str, metrics: Mapping[str, float]) -> str | None:
    """One line for the console when the spend limit stopped the job (None otherwise)."""
    if stop != SpendLimitReached.kind:
        return None
    return (
        f"STOPPED BY THE LLM SPEND LIMIT: {metrics['n_missing']:.0f} of {metrics['n_planned']:.0f} instances have no "
        f"record ({metrics['cost_total_usd']:.4f} USD spent in this job dir). Raise services.llm.spend.max_usd "
        "and rerun into the same dir to finish them."
    )
