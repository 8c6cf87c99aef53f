"""The clarify -> answer -> rewrite -> search -> judge protocol, per instance and per job.

Each role is called with exactly what the closed-book protocol allows: the
Clarifier and Rewriter get the blurred query (and Q&A pairs), never the intent;
the User Answerer gets the intent and one question. Records stream to
``records.jsonl`` as soon as an instance finishes, so an interrupted job resumes
where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from cts.qtypes import QuestionTyper
from cts.records import ArmResult, ErrorInfo, Record, read_records
from cts.scoring import restore_score
from cts.types import (
    QA,
    BudgetExceeded,
    CallError,
    Clarifier,
    Gold,
    Instance,
    Judge,
    Label,
    Rewriter,
    SearchBackend,
    SearchResult,
    UnscoredError,
    UserAnswerer,
)

log = logging.getLogger(__name__)

RECORDS_FILE = "records.jsonl"
TRACES_FILE = "traces.jsonl"


@dataclass(frozen=True)
class Roles:
    """The instantiated components of one job."""

    clarifier: Clarifier
    ua: UserAnswerer
    rewriter: Rewriter
    search: SearchBackend
    judge: Judge
    qtyper: QuestionTyper


class StageError(Exception):
    """Wraps a failure with the pipeline stage it happened in."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(f"{info.stage}: {info.kind}: {info.message}")
        self.info = info


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Turn a role failure into a :class:`StageError` naming the stage.

    ``BudgetExceeded`` passes through untouched: it stops the job, not the instance.
    """
    try:
        yield
    except (BudgetExceeded, StageError, asyncio.CancelledError):
        raise
    except UnscoredError as e:
        raise StageError(ErrorInfo(name, "invalid_output", e.reason)) from e
    except CallError as e:
        raise StageError(ErrorInfo(name, "api_error", str(e))) from e
    except Exception as e:  # noqa: BLE001 - one broken instance must not stop the job
        raise StageError(ErrorInfo(name, "exception", f"{type(e).__name__}: {e}")) from e


async def run_arm(query: str, gold: Gold, roles: Roles) -> tuple[ArmResult, dict[str, Any]]:
    """Search one query and judge the answer against the gold nuggets.

    Returns:
        The arm result (score None with the error when a stage failed) and a trace line.
    """
    trace_line: dict[str, Any] = {"query": query}
    try:
        with stage("search"):
            result = await roles.search.search(query)
        trace_line["trace"] = list(result.trace)
        with stage("judge"):
            labels = await roles.judge.judge(result.answer, gold.nuggets)
            score = restore_score(labels, gold.nuggets)
    except StageError as e:
        return ArmResult(query=query, error=e.info), trace_line
    return _arm(query, result, labels, score), trace_line


def _arm(query: str, result: SearchResult, labels: dict[str, Label], score: float | None) -> ArmResult:
    error = None
    if result.end_reason == "error":
        # A backend that failed mid-run is not a bad answer: unscored, with the reason.
        error, score = ErrorInfo("search", "api_error", str(result.summary.get("error", "search ended in error"))), None
    elif score is None:
        error = ErrorInfo("judge", "no_weight", "gold has zero total weight")
    return ArmResult(
        query=query,
        answer=result.answer,
        answer_rule=result.answer_rule,
        end_reason=result.end_reason,
        trace_summary=dict(result.summary),
        labels=labels,
        score=score,
        error=error,
    )


async def clarify(instance: Instance, k: int, roles: Roles) -> tuple[list[str], list[QA], str]:
    """Phase 1 of the closed-book protocol: questions, answers, rewrite.

    The Clarifier and Rewriter receive ``blurred_query`` only; the User Answerer
    receives ``fused_query`` and one question at a time.
    """
    with stage("clarify"):
        questions = await roles.clarifier.ask(instance.blurred_query, k)
    if not questions:
        return [], [], instance.blurred_query
    with stage("answer"):
        answers = await asyncio.gather(*(roles.ua.answer(instance.fused_query, c) for c in questions))
    qa = [QA(c, a) for c, a in zip(questions, answers)]
    with stage("rewrite"):
        rewritten = await roles.rewriter.rewrite(instance.blurred_query, qa)
    return questions, qa, rewritten


async def run_instance(
    instance: Instance, gold: Gold, k: int, roles: Roles
) -> tuple[Record, list[dict[str, Any]]]:
    """Run both arms (clarified system and orig) for one instance."""
    start = time.perf_counter()
    orig_task = asyncio.ensure_future(run_arm(instance.blurred_query, gold, roles))
    questions: list[str] = []
    qa: list[QA] = []
    rewritten: str | None = None
    error: ErrorInfo | None = None
    system: ArmResult | None = None
    try:
        questions, qa, rewritten = await clarify(instance, k, roles)
    except StageError as e:
        error = e.info
    orig, orig_trace = await orig_task
    traces = [{"id": instance.id, "arm": "orig", **orig_trace}]
    if rewritten == instance.blurred_query:
        system = orig  # the same query searched twice would give the same (cached) result
    elif rewritten is not None:
        system, sys_trace = await run_arm(rewritten, gold, roles)
        traces.append({"id": instance.id, "arm": "system", **sys_trace})
    qtypes = [await roles.qtyper.classify(c) for c in questions]
    record = Record(
        id=instance.id,
        k=k,
        questions=tuple(questions),
        question_types=tuple(tuple(t) for t in qtypes),
        answers=tuple(p.answer for p in qa),
        rewritten_query=rewritten,
        system=system,
        orig=orig,
        error=error or (system.error if system else None),
        elapsed_s=round(time.perf_counter() - start, 4),
    )
    return record, traces


UsageScope = Callable[[], contextlib.AbstractContextManager[Mapping[str, Mapping[str, float]]]]


@contextlib.contextmanager
def _no_usage() -> Iterator[Mapping[str, Mapping[str, float]]]:
    yield {}


async def run_job(
    instances: Sequence[Instance],
    gold: Mapping[str, Gold],
    roles: Roles,
    *,
    k: int,
    out_dir: Path,
    concurrency: int = 8,
    usage_scope: UsageScope = _no_usage,
    progress: bool = True,
) -> tuple[list[Record], str]:
    """Run every unfinished instance, streaming records to ``out_dir/records.jsonl``.

    Finished ids found in an existing ``records.jsonl`` are skipped (resume).

    Returns:
        All records of the job (old and new) and the stop reason (``done`` or ``budget``).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    finished = {r.id: r for r in read_records(out_dir / RECORDS_FILE)}
    todo = [i for i in instances if i.id not in finished]
    sem = asyncio.Semaphore(concurrency)

    async def one(inst: Instance) -> tuple[Record, list[dict[str, Any]]]:
        async with sem:
            with usage_scope() as usage:
                record, traces = await run_instance(inst, gold[inst.id], k, roles)
            return replace(record, usage={r: dict(u) for r, u in usage.items()}), traces

    tasks = [asyncio.ensure_future(one(i)) for i in todo]
    stop = "done"
    bar = tqdm(total=len(instances), initial=len(finished), desc=f"k={k}", disable=not progress, unit="q")
    with _Sink(out_dir) as sink:
        try:
            for fut in asyncio.as_completed(tasks):
                record, traces = await fut
                sink.write(record, traces)
                finished[record.id] = record
                bar.update(1)
        except BudgetExceeded as e:
            log.warning("budget reached, stopping cleanly (finished records kept): %s", e)
            stop = "budget"
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            bar.close()
    return [finished[i.id] for i in instances if i.id in finished], stop


class _Sink:
    """Appends each finished instance to the job dir, flushed at once.

    Traces go first and the record last: a record is the commit marker of its
    instance, so a job killed in between reruns that instance on resume.
    """

    def __init__(self, out_dir: Path) -> None:
        self.records = (out_dir / RECORDS_FILE).open("a", encoding="utf-8")
        self.traces = (out_dir / TRACES_FILE).open("a", encoding="utf-8")

    def __enter__(self) -> _Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.records.close()
        self.traces.close()

    def write(self, record: Record, traces: list[dict[str, Any]]) -> None:
        """Persist one instance: its traces, then its record."""
        for t in traces:
            self.traces.write(json.dumps(t, ensure_ascii=False, default=str) + "\n")
        self.traces.flush()
        self.records.write(record.to_json() + "\n")
        self.records.flush()
