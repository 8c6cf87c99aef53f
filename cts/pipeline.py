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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from cts.qtypes import QuestionTyper, classify_question
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
        if result.end_reason == "error":
            # A backend that failed mid-run is not a bad answer: unscored, and not judged.
            reason = str(result.summary.get("error", "search ended in error"))
            return _arm(query, result, {}, None, ErrorInfo("search", "api_error", reason)), trace_line
        with stage("judge"):
            labels = await roles.judge.judge(result.answer, gold.nuggets)
            score = restore_score(labels, gold.nuggets)
    except StageError as e:
        return ArmResult(query=query, error=e.info), trace_line
    no_weight = ErrorInfo("judge", "no_weight", "gold has zero total weight")
    return _arm(query, result, labels, score, None if score is not None else no_weight), trace_line


def _arm(
    query: str, result: SearchResult, labels: dict[str, Label], score: float | None, error: ErrorInfo | None
) -> ArmResult:
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


@dataclass
class Interaction:
    """Phase 1 of one instance, filled as it goes (kept when a later stage fails)."""

    questions: list[str] = field(default_factory=list)
    qa: list[QA] = field(default_factory=list)
    rewritten: str | None = None
    error: ErrorInfo | None = None


async def clarify(instance: Instance, k: int, roles: Roles) -> Interaction:
    """Phase 1 of the closed-book protocol: questions, answers, rewrite.

    The Clarifier and Rewriter receive ``blurred_query`` only; the User Answerer
    receives ``fused_query`` and one question at a time. A failing stage is
    recorded in the result, with whatever the earlier stages produced.
    """
    out = Interaction()
    try:
        with stage("clarify"):
            out.questions = list(await roles.clarifier.ask(instance.blurred_query, k))
        if not out.questions:
            out.rewritten = instance.blurred_query
            return out
        with stage("answer"):
            answers = await asyncio.gather(*(roles.ua.answer(instance.fused_query, c) for c in out.questions))
        out.qa = [QA(c, a) for c, a in zip(out.questions, answers)]
        with stage("rewrite"):
            out.rewritten = await roles.rewriter.rewrite(instance.blurred_query, out.qa)
    except StageError as e:
        out.error = e.info
    return out


async def type_questions(questions: Sequence[str], roles: Roles) -> tuple[tuple[str, ...], ...]:
    """Question types for the diagnostics; an LLM typer that fails falls back to the lexicon."""
    try:
        with stage("qtype"):
            found = await asyncio.gather(*(roles.qtyper.classify(c) for c in questions))
    except StageError as e:
        log.warning("question typing failed, using the lexicon: %s", e)
        found = [classify_question(c) for c in questions]
    return tuple(tuple(t) for t in found)


async def run_instance(
    instance: Instance, gold: Gold, k: int, roles: Roles
) -> tuple[Record, list[dict[str, Any]]]:
    """Run both arms (clarified system and orig) for one instance."""
    start = time.perf_counter()
    orig_task = asyncio.ensure_future(run_arm(instance.blurred_query, gold, roles))
    try:
        inter = await clarify(instance, k, roles)
        orig, orig_trace = await orig_task
    finally:
        orig_task.cancel()  # a no-op once done; stops the spending when the budget ends the job
    traces = [{"id": instance.id, "arm": "orig", **orig_trace}]
    system: ArmResult | None = None
    if inter.rewritten == instance.blurred_query:
        system = orig  # the same query searched twice would give the same (cached) result
    elif inter.rewritten is not None:
        system, sys_trace = await run_arm(inter.rewritten, gold, roles)
        traces.append({"id": instance.id, "arm": "system", **sys_trace})
    record = Record(
        id=instance.id,
        k=k,
        questions=tuple(inter.questions),
        question_types=await type_questions(inter.questions, roles),
        answers=tuple(p.answer for p in inter.qa),
        rewritten_query=inter.rewritten,
        system=system,
        orig=orig,
        error=inter.error or (system.error if system else None),
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
    models: Mapping[str, str] | None = None,
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
            return replace(record, usage={r: dict(u) for r, u in usage.items()}, models=dict(models or {})), traces

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


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line left half-written by a killed job, so appending cannot glue onto it."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as f:
        data = f.read()
        if not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


class _Sink:
    """Appends each finished instance to the job dir, flushed at once.

    Traces go first and the record last: a record is the commit marker of its
    instance, so a job killed in between reruns that instance on resume.
    """

    def __init__(self, out_dir: Path) -> None:
        _drop_torn_tail(out_dir / RECORDS_FILE)
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
