"""The clarify -> answer -> rewrite -> search -> judge protocol, per instance and per job.

Each role is called with exactly what the closed-book protocol allows: the
Clarifier and Rewriter get the blurred query (and Q&A pairs), never the intent;
the User Answerer gets the intent and one question. Records stream to
``records.jsonl`` as soon as an instance finishes, so an interrupted job resumes
where it stopped. A job's :class:`~cts.protocol.design.Design` runs each instance
``repeats`` times (one record per repeat) and adds the attribution arms
(:mod:`cts.protocol.arms`); the default runs each once with the orig and clarified arms.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tqdm.auto import tqdm

from cts._util.aio import bounded
from cts.core.contracts import (
    Clarifier,
    Judge,
    JudgePanel,
    QuestionTyper,
    Rewriter,
    SearchBackend,
    SequentialClarifier,
    UserAnswerer,
)
from cts.core.records import ArmResult, ErrorInfo, Record, search_call_error
from cts.core.scoring import restore_score
from cts.core.stages import ANSWER, CLARIFY, JUDGE, REWRITE, SEARCH, added
from cts.core.types import QA, Gold, Instance, Label, SearchResult
from cts.llm import priority_scope
from cts.protocol.arms import ArmOutcome, oracle_arm, run_rewrite_arms
from cts.protocol.job_files import JobSink, read_results
from cts.protocol.settings import InstanceSettings, JobSettings
from cts.protocol.stages import StageClock, StageError, stage
from cts.protocol.streaming import advancing, call_hook, drain, record_key, show_calls
from cts.text.qtypes import classify_question

log = logging.getLogger(__name__)


STAGE_CALLS: collections.Counter[str] = collections.Counter()
"""Process-wide count of search and judge calls made by :func:`run_arm` (post-hoc analyses prove 0 with it)."""


@dataclass(frozen=True)
class Roles:
    """The instantiated components of one job."""

    clarifier: Clarifier
    ua: UserAnswerer
    rewriter: Rewriter
    search: SearchBackend
    judge: Judge
    qtyper: QuestionTyper
    extra: Mapping[str, Any] = field(default_factory=dict)
    """The components of the stages declared beyond the paper's, by role (:func:`cts.core.stages.added`)."""


async def run_arm(query: str, gold: Gold, roles: Roles) -> tuple[ArmResult, dict[str, Any]]:
    """Search one query and judge the answer against the gold nuggets.

    Returns:
        The arm result (score None with the error when a stage failed) and a trace line
        (the backend's trace, and ``stages``: when its search and judge ran).
    """
    clock = StageClock()
    trace_line: dict[str, Any] = {"query": query, "stages": clock.spans}  # filled as the stages run
    try:
        with clock.stage(SEARCH.name, SEARCH.span):
            STAGE_CALLS[SEARCH.name] += 1
            result = await roles.search.search(query)
    except StageError as e:
        return ArmResult(query=query, error=e.info), trace_line
    trace_line["trace"] = list(result.trace)
    if result.end_reason == "error":
        # A backend that failed mid-run is not a bad answer: unscored, and not judged.
        return _arm(query, result, {}, None, _search_error(result)), trace_line
    if result.end_reason == "truncated":  # the agent's turns kept stopping at their output cap
        cut = ErrorInfo("search", "truncated", "agent turns stopped at the output cap")
        return _arm(query, result, {}, None, cut), trace_line
    try:
        with clock.stage(JUDGE.name, JUDGE.span):
            STAGE_CALLS[JUDGE.name] += 1
            labels, members = await _judge(roles.judge, result.answer, gold)
            score = restore_score(labels, gold.nuggets)
    except StageError as e:  # the answer was found: keep it (and why the search ended) in the record
        return _arm(query, result, {}, None, e.info), trace_line
    no_weight = ErrorInfo("judge", "no_weight", "gold has zero total weight")
    arm = _arm(query, result, labels, score, None if score is not None else no_weight)
    return (replace(arm, judge_members=members) if members else arm), trace_line


async def _judge(judge: Judge, answer: str, gold: Gold) -> tuple[dict[str, Label], dict[str, dict[str, Label]]]:
    """The judge's labels, and each member's when the judge is a panel (:class:`~cts.core.contracts.JudgePanel`)."""
    if isinstance(judge, JudgePanel):
        verdict = await judge.judge_members(answer, gold.nuggets)
        return dict(verdict.labels), {m: dict(labels) for m, labels in verdict.members.items()}
    return await judge.judge(answer, gold.nuggets), {}


def _search_error(result: SearchResult) -> ErrorInfo:
    """The failure that ended a search run, from the last error event of its trace."""
    failure = search_call_error(result)
    return ErrorInfo("search", "infra" if failure.infra else "api_error", str(failure), failure.endpoint)


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
    searched: str | None = None
    """The query the clarified arm searches: the rewrite, refined by the declared stages after it."""
    error: ErrorInfo | None = None
    clock: StageClock = field(default_factory=StageClock)
    """When each stage ran: clarify (per turn when sequential), each UA answer, rewrite."""


async def clarify(instance: Instance, k: int, roles: Roles, clock: StageClock | None = None) -> Interaction:
    """Phase 1 of the closed-book protocol: questions, answers, rewrite.

    The Clarifier and Rewriter receive ``blurred_query`` only; the User Answerer
    receives ``fused_query`` and one question at a time. A failing stage is
    recorded in the result, with whatever the earlier stages produced.
    """
    out = Interaction(clock=clock or StageClock())
    try:
        if clarify_mode(roles.clarifier) == "sequential":
            await _ask_sequentially(instance, k, roles, out)
        else:
            await _ask_batch(instance, k, roles, out)
        if not out.questions:
            out.rewritten = out.searched = instance.blurred_query
            return out
        with out.clock.stage(REWRITE.name, REWRITE.span):
            out.rewritten = await roles.rewriter.rewrite(instance.blurred_query, out.qa)
        out.searched = await refine(out.rewritten, roles, out.clock)
    except StageError as e:
        out.error = e.info
    return out


async def refine(query: str, roles: Roles, clock: StageClock) -> str:
    """``query`` through each stage declared between the rewrite and the search, in order (each sees the query only)."""
    for declared in added():
        with clock.stage(declared.name, declared.span):
            query = str(await getattr(roles.extra[declared.role], declared.method)(query))
    return query


def clarify_mode(clarifier: Clarifier) -> str:
    """``sequential`` for a clarifier configured so (``clarifier.mode``), else ``batch`` (the paper)."""
    if isinstance(clarifier, SequentialClarifier) and clarifier.mode == "sequential":
        return "sequential"
    return "batch"


async def _ask_batch(instance: Instance, k: int, roles: Roles, out: Interaction) -> None:
    """The paper: k questions at once, then one independent UA call per question."""
    with out.clock.stage(CLARIFY.name, CLARIFY.span):
        out.questions = list(await roles.clarifier.ask(instance.blurred_query, k))
    with stage(ANSWER.name):
        answers = await asyncio.gather(
            *(
                out.clock.call(f"{ANSWER.span} {i}", roles.ua.answer(instance.fused_query, c))
                for i, c in enumerate(out.questions, 1)
            )
        )
    out.qa = [QA(c, a) for c, a in zip(out.questions, answers)]


async def _ask_sequentially(instance: Instance, k: int, roles: Roles, out: Interaction) -> None:
    """One turn at a time: turn i sees q and pairs 1..i-1 (never q*); None stops early."""
    clarifier = roles.clarifier
    assert isinstance(clarifier, SequentialClarifier)
    for turn in range(1, k + 1):
        with out.clock.stage(CLARIFY.name, f"{CLARIFY.span} turn {turn}"):
            question = await clarifier.next_question(instance.blurred_query, tuple(out.qa), k)
        if question is None:
            return
        out.questions.append(question)
        with out.clock.stage(ANSWER.name, f"{ANSWER.span} {turn}"):
            answer = await roles.ua.answer(instance.fused_query, question)
        out.qa.append(QA(question, answer))


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
    instance: Instance, gold: Gold, roles: Roles, settings: InstanceSettings, repeat: int = 0
) -> tuple[Record, list[dict[str, Any]]]:
    """Run both arms (clarified and orig), and the design's attribution arms, for one instance.

    Args:
        settings: The budget k, the job's design (repeats and arms) and where the orig arm is shared.
        repeat: Which run of the instance this is (its stages sample at :meth:`Design.repeat_of`).

    Returns:
        The record and the trace lines: one per arm searched, then ``arm: instance`` with
        when the instance and its clarify, UA answer, rewrite and qtype stages ran.
    """
    clock = StageClock()
    k, design, orig_share = settings.k, settings.design, settings.orig_share
    roles = design.roles_at(roles, repeat)

    def searched(arm: str, query: str) -> Awaitable[ArmOutcome]:
        def work() -> Awaitable[ArmOutcome]:
            return run_arm(query, gold, roles)

        return orig_share(design.share_key(instance.id, repeat, arm, query), work) if orig_share else work()

    orig_task = asyncio.ensure_future(searched("orig", instance.blurred_query))
    oracle = asyncio.ensure_future(oracle_arm(instance.fused_query, searched)) if "oracle" in design.arms else None
    try:
        inter = await clarify(instance, k, roles, clock)
        orig, orig_trace = await orig_task
        arms = {"oracle": await oracle} if oracle is not None else {}
    finally:
        orig_task.cancel()  # a no-op once done; stops the spending when the spend limit ends the job
        if oracle is not None:
            oracle.cancel()
    run_key = {"id": instance.id, **({"repeat": repeat} if repeat else {})}  # as the record: repeat 0 leaves it out
    traces = [{**run_key, "arm": "orig", **orig_trace}]
    clarified: ArmResult | None = None
    if inter.searched == instance.blurred_query:
        clarified = orig  # the same query searched twice would give the same (cached) result
    elif inter.searched is not None:
        clarified, clarified_trace = await run_arm(inter.searched, gold, roles)
        traces.append({**run_key, "arm": "clarified", **clarified_trace})
    if inter.error is None:

        async def rewritten(arm: str, query: str) -> ArmOutcome:
            return (orig, {}) if query == instance.blurred_query else await searched(arm, query)

        arms.update(await run_rewrite_arms(design.arms, instance.blurred_query, inter.qa, roles.rewriter, rewritten))
    traces += [{**run_key, "arm": name, **trace} for name, (_, trace) in arms.items() if trace]
    question_types = await clock.call("qtype", type_questions(inter.questions, roles))
    end_ns = clock.now_ns()
    traces.append({**run_key, "arm": "instance", "start_ns": clock.start_ns, "end_ns": end_ns, "stages": clock.spans})
    record = Record(
        id=instance.id,
        k=k,
        questions=tuple(inter.questions),
        question_types=question_types,
        answers=tuple(p.answer for p in inter.qa),
        rewritten_query=inter.rewritten,
        clarified=clarified,
        orig=orig,
        error=inter.error or (clarified.error if clarified else None),
        elapsed_s=round((end_ns - clock.start_ns) / 1e9, 4),
        mode=clarify_mode(roles.clarifier),
        repeat=repeat,
        arms={name: arm for name, (arm, _) in arms.items()},
        resampled=design.stages,
    )
    return record, traces


async def run_instances(
    instances: Sequence[Instance],
    gold: Mapping[str, Gold],
    roles: Roles,
    settings: InstanceSettings,
    job: JobSettings,
) -> tuple[list[Record], str]:
    """Run every unfinished instance, streaming records to ``out_dir/records.jsonl``.

    Each instance runs ``design.repeats`` times; an (id, repeat) found finished in an
    existing ``records.jsonl`` is skipped (resume), so raising ``repeats`` runs only the new ones. An
    instance that failed on infrastructure is not finished: it is listed in
    ``out_dir/infra_failures.jsonl`` (this invocation's failures) instead, and a
    resume runs it again; so are infrastructure-failed records of older versions.
    Only ``concurrency`` instances exist at a time, and an instance's traces are
    dropped once written, so memory does not grow with the dataset beyond what
    ``keep`` retains of each record.

    Args:
        instances: The job's instances.
        gold: Their gold, by instance id (read when an instance needs it).
        roles: The job's components.
        settings: How each instance runs: k, the design (repeats and attribution arms), the orig arm's sharing.
        job: Where records go (``out_dir``), ``concurrency``, usage accounting, what is kept and shown.

    Returns:
        The committed records of the job (old and new, as ``keep`` made them) and the
        stop reason: ``done``, ``infra`` (some instances failed on infrastructure),
        ``circuit_open`` (an endpoint kept failing, the job stopped) or ``spend_limit``.
    """
    out_dir, keep, progress, concurrency = job.out_dir, job.keep, job.progress, job.concurrency
    out_dir.mkdir(parents=True, exist_ok=True)
    finished = {record_key(r): keep(r) for r in read_results(out_dir)}
    runs = [(i, n) for n in range(settings.design.repeats) for i in instances]
    todo = [(i, n) for i, n in runs if (i.id, n) not in finished]
    by_id = {i.id: i for i, _ in todo}
    on_instance, models = job.on_instance, dict(job.models or {})
    hook = (
        None if on_instance is None else (lambda r, t: call_hook(on_instance, by_id[r.id], gold[r.id], r, t))
    )  # gold may be read lazily
    sem = asyncio.Semaphore(concurrency)

    async def one(run: tuple[Instance, int]) -> tuple[Record, list[dict[str, Any]]]:
        inst, repeat = run
        async with sem:
            with job.usage_scope() as usage, priority_scope():
                record, traces = await run_instance(inst, gold[inst.id], roles, settings, repeat)
            return replace(record, usage={r: dict(u) for r, u in usage.items()}, models=models), traces

    shared = None if isinstance(progress, bool) else progress
    done = sum(1 for i, n in runs if (i.id, n) in finished)
    bar = tqdm(total=len(runs), initial=done, desc=f"k={settings.k}", disable=progress is not True, unit="q")
    if shared is not None:
        shared.add(len(runs), len(runs) - len(todo))
        hook = advancing(shared, hook)
    with JobSink(out_dir) as sink:
        ticker = asyncio.ensure_future(show_calls(bar, shared)) if progress is not False else None
        try:
            stop = await drain(bounded(map(one, todo), concurrency), sink, finished, bar, keep, hook)
        finally:
            if ticker is not None:
                ticker.cancel()
            bar.close()
    return [finished[(i.id, n)] for i, n in runs if (i.id, n) in finished], stop
