"""How a job ended, said in its last lines and its exit status.

A job whose instances failed on infrastructure (see :data:`cts.core.types.ErrorKind`),
or that a circuit breaker stopped, is incomplete: it ends with a few lines saying
how many instances are missing, which endpoint failed and the command that resumes
it (:func:`cts._util.interrupt.resume_command`), and exits non-zero (:class:`JobIncomplete`).
A job whose every instance is unscored is complete but says so loudly. A task that
works on a whole set at once (gold, the robustness analyses) stops at the first
infrastructure failure instead, with one line (:func:`stop_task`).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from hydra.errors import CompactHydraException

from cts._util.interrupt import recorded_sweep
from cts.core.errors import TaskStopped
from cts.core.records import Record
from cts.core.types import CallError, CircuitOpen, RequestRejected, SpendLimitReached
from cts.protocol.job_files import INFRA_FILE, RECORDS_FILE
from cts.protocol.unscored import mostly_unscored_note

INCOMPLETE_STOPS = frozenset({"infra", "circuit_open", "request_rejected"})


class JobIncomplete(CompactHydraException):
    """Some instances were not run or failed on infrastructure; a resume finishes them.

    Hydra prints only the message of a ``CompactHydraException`` (no traceback) and exits 1:
    ``headline`` plus, when there is one, ``Resume with: <resume>``. In a multirun Hydra
    prints the first failed job's, so every job's names the sweep's command.
    """

    def __init__(self, headline: str, resume: str = "") -> None:
        super().__init__(f"{headline} Resume with: {resume}" if resume else headline)
        self.headline, self.resume = headline, resume

    def __reduce__(self) -> tuple[type[JobIncomplete], tuple[str, str]]:  # pickled back from a launcher's worker
        return type(self), (self.headline, self.resume)


@dataclass(frozen=True)
class Outcome:
    """What the end of one job has to say."""

    stop: str
    n_total: int
    n_done: int
    failures: tuple[Mapping[str, Any], ...]
    """Lines of ``infra_failures.jsonl``: one per failed instance, plus the breaker's stop."""

    @property
    def incomplete(self) -> bool:
        """Whether the job must exit non-zero."""
        return self.stop in INCOMPLETE_STOPS or any(f.get("id") for f in self.failures)

    @property
    def n_infra(self) -> int:
        """Instances of this invocation that failed on infrastructure."""
        return sum(1 for f in self.failures if f.get("id"))


def read_outcome(job_dir: Path, stop: str, n_total: int, n_done: int) -> Outcome:
    """Collect the outcome of the job in ``job_dir`` (its ``infra_failures.jsonl``)."""
    path = job_dir / INFRA_FILE
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return Outcome(stop, n_total, n_done, tuple(json.loads(x) for x in lines if x.strip()))


def incomplete_message(outcome: Outcome, job_dir: Path) -> str:
    """The last lines of an incomplete job but one: what is missing and where it failed."""
    missing = outcome.n_total - outcome.n_done
    lines = [f"cts: job INCOMPLETE: {outcome.n_done} of {outcome.n_total} instance(s) finished, {missing} missing."]
    breaker = next((f for f in outcome.failures if f.get("kind") == "circuit_open"), None)
    if breaker is not None:
        lines.append(f"  circuit breaker stopped the job: {breaker.get('message')}")
    rejected = next((f for f in outcome.failures if f.get("kind") == "request_rejected"), None)
    if rejected is not None:
        lines.append(f"  configuration failure, not a result: {rejected.get('message')}")
        lines.append("  fix the model file or the role's params (conf/model/, services.llm), then resume")
    if outcome.n_infra:
        lines.append(f"  {outcome.n_infra} instance(s) failed on infrastructure (not recorded; a resume retries them):")
        by_endpoint = Counter(str(f.get("endpoint") or "?") for f in outcome.failures if f.get("id"))
        for endpoint, n in by_endpoint.most_common():
            first = next(f for f in outcome.failures if f.get("id") and str(f.get("endpoint") or "?") == endpoint)
            lines.append(f"    {endpoint}: {n} (e.g. {first.get('stage')}: {str(first.get('message'))[:300]})")
    lines.append(f"  finished instances: {job_dir / RECORDS_FILE}; failures: {job_dir / INFRA_FILE}")
    return "\n".join(lines)


def all_unscored_warning(records: Sequence[Record]) -> str | None:
    """A loud warning when every instance is unscored (None otherwise)."""
    if not records or any(r.score is not None for r in records):
        return None
    errors = Counter(f"{e.stage}: {e.kind}" for r in records if (e := _first_error(r)) is not None)
    top = ", ".join(f"{kind} ({n})" for kind, n in errors.most_common(3)) or "no error recorded"
    bar = "!" * 78
    return (
        f"{bar}\ncts: WARNING: ALL {len(records)} INSTANCES ARE UNSCORED (score null); no score was measured.\n"
        f"  errors: {top}; see records.jsonl\n{bar}"
    )


def _first_error(r: Record) -> Any:
    return r.error or (r.clarified.error if r.clarified else None) or (r.orig.error if r.orig else None)


def finish(outcome: Outcome, records: Sequence[Record], job_dir: Path, resume: str, *, multirun: bool) -> None:
    """Say how the job ended; stop with exit status 1 when it is incomplete.

    Args:
        resume: The command that resumes the job; in a multirun the running sweep's
            (:func:`cts._util.interrupt.recorded_sweep`) replaces it when ``job_dir`` is inside that sweep.
        multirun: Raise :class:`JobIncomplete` (Hydra runs the other jobs, then exits 1)
            instead of :class:`~cts.core.errors.TaskStopped` (a single run ends at once, without a traceback).

    Raises:
        JobIncomplete: In a multirun, when instances failed on infrastructure or a breaker stopped the job.
        TaskStopped: The same in a single run.
    """
    warning = all_unscored_warning(records)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    note = mostly_unscored_note(records)
    if note:
        print(note, file=sys.stderr, flush=True)
    if not outcome.incomplete:
        return
    # Printed here because a multirun re-raises only its first failed job's exception.
    print(incomplete_message(outcome, job_dir), file=sys.stderr, flush=True)
    missing = outcome.n_total - outcome.n_done
    headline = f"cts: job incomplete ({missing} instance(s) missing), exit status 1."
    if not multirun:
        raise TaskStopped(f"{headline} Resume with: {resume}")
    raise JobIncomplete(headline, sweep_resume_of(job_dir) or resume)


def sweep_resume_of(job_dir: Path) -> str | None:
    """The resume command of the running sweep whose dir holds ``job_dir`` (None outside one)."""
    for parent in Path(job_dir).absolute().parents:
        if (command := recorded_sweep(str(parent))) is not None:
            return command
    return None


def stop_reason(error: BaseException) -> str:
    """The ``stop_reason`` of a task stopped by an infrastructure failure: spend_limit, circuit_open or infra."""
    return error.kind if isinstance(error, (SpendLimitReached, CircuitOpen)) else "infra"


def stop_message(task: str, error: BaseException) -> str:
    """One line: which task an infrastructure failure stopped, where, and what to do."""
    if isinstance(error, RequestRejected):
        what = str(error)
    elif isinstance(error, CircuitOpen):
        what = f"circuit breaker open for {error}"
    elif isinstance(error, SpendLimitReached):
        what = f"spend limit reached ({error}; services.llm.spend.max_usd)"
    elif isinstance(error, CallError):
        what = f"{error.kind} at {error.endpoint or 'an endpoint'}: {error.message}"
    else:
        what = f"{type(error).__name__}: {error}"
    what = " ".join(what.split())[:400].rstrip(".")
    return (
        f"cts: {task} stopped by an infrastructure failure, its results were not written: {what}. "
        "Fix it and rerun the same command (answers already received are cached)."
    )


def stop_task(task: str, error: BaseException, *, multirun: bool) -> NoReturn:
    """End a task that an infrastructure failure stopped: one line, exit status 1.

    Args:
        multirun: Raise :class:`JobIncomplete` (Hydra runs the other jobs, then exits 1)
            instead of :class:`~cts.core.errors.TaskStopped` (a single run ends at once, without a traceback).
    """
    line = stop_message(task, error)
    raise JobIncomplete(line) if multirun else TaskStopped(line)
