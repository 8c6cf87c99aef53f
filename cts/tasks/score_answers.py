"""Task ``score_answers``: judge answers cts did not produce against the dataset's gold, as a normal job.

    python run.py task=score_answers dataset=hard518 dataset.release=release \\
        answers=release/results/candidates/ebk1__cand_hard518.jsonl \\
        orig_answers=release/results/candidates/orig__cand_hard518.jsonl judge=lexical

Each answer (a candidate file, :mod:`cts.release.outputs`) is judged exactly as a job's searched
answer is (:func:`cts.protocol.pipeline.run_arm`, the configured judge: lexical, a registry model,
a panel); the orig file's answers are the orig arm. The job dir holds records, traces and
``summary.json`` (the paired bootstrap delta against orig), and the job is one MLflow run with a
trace per instance. No clarify or search call is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from tqdm.auto import tqdm

from cts import tracking
from cts._util.aio import bounded
from cts.core.contracts import Judge
from cts.core.errors import ConfigError
from cts.core.records import ArmResult, Record, read_records
from cts.core.types import Gold, Instance, SearchResult
from cts.data.jsonl import Dataset, dataset_metrics
from cts.llm import usage_scope
from cts.protocol.job_files import RECORDS_FILE, JobSink
from cts.protocol.metrics import summarize
from cts.protocol.pipeline import Roles, run_arm
from cts.protocol.spend import run_within_spend_limit
from cts.protocol.streaming import call_hook, drain, record_key
from cts.release.outputs import Output, OutputLayoutError, OutputScan, scan_outputs, system_and_k, unknown_ids
from cts.tasks.evaluate import EvalProtocol, instance_tracer, log_job_outputs
from cts.tasks.job import Execution, RunInfo, print_metrics, write_config
from cts.tasks.registry import TaskContext, read_dataset, task


@dataclass(frozen=True)
class Answers:
    """The task's input: the dataset, the answers to judge and (optionally) the orig arm's."""

    dataset: Dataset
    answers: OutputScan
    orig: OutputScan | None = None
    k: int | None = None
    """The budget the answers' file name says (None: the name says none)."""
    system: str | None = None
    """The system the answers' file name says (None: the name says none)."""


@dataclass(frozen=True)
class GivenAnswer:
    """A search backend that returns an answer given in advance (the judge then sees it as a searched one)."""

    answer: str

    async def search(self, query: str) -> SearchResult:
        """The given answer, whatever the query."""
        return SearchResult(answer=self.answer, answer_rule="given", end_reason="answer")


def _scan(path: str, fields: Mapping[str, str], gold: Mapping[str, Gold]) -> OutputScan:
    try:
        scan = scan_outputs(path, "candidates", fields)
    except OutputLayoutError as e:
        raise ConfigError(f"error: {e}") from None
    problems = [*scan.problems, *unknown_ids(scan, set(gold), "the dataset's gold")]
    if problems:
        raise ConfigError("\n".join(f"error: {p}" for p in problems))
    return scan


def read_answers(ctx: TaskContext) -> Answers:
    """The dataset, then the answer files, each checked before the job starts (every bad row one ``error:`` line)."""
    dataset = read_dataset(ctx)
    fields = dict(ctx.value("answer_fields", default=None) or {})
    fields = {k: str(v) for k, v in fields.items() if v}
    path, orig = ctx.value("answers"), ctx.value("orig_answers", default=None)
    try:
        system, k = system_and_k(path)
    except OutputLayoutError:
        system, k = None, None
    scans = [_scan(p, fields, dataset.gold) if p else None for p in (path, orig)]
    assert scans[0] is not None
    return Answers(dataset, scans[0], scans[1], k, system)


def compose_score_answers(ctx: TaskContext) -> float | None:
    """Build the judge and score the answers (the composer of :func:`score_answers_task`)."""
    judge_name = ctx.value("judge", "model", "id", default=None) or ctx.value("judge", "_target_").rsplit(".", 1)[-1]
    inputs = ctx.input()
    k = inputs.k if inputs.k is not None else int(ctx.value("k"))
    return score_answers_task(
        inputs=inputs,
        judge=ctx.build("judge"),
        run=ctx.run,
        protocol=EvalProtocol(k, int(ctx.value("seed", default=0)), ctx.value("bootstrap")),
        execution=Execution(
            ctx.spend_limit, int(ctx.value("concurrency", default=8)), models={"judge": str(judge_name)}
        ),
    )


async def judge_row(
    row: Output, orig: Output | None, gold: Gold, judge: Judge, k: int
) -> tuple[Record, list[dict[str, Any]]]:
    """One instance's record (the answer as the clarified arm, the orig answer as the orig arm) and its trace lines."""
    arms: dict[str, ArmResult] = {}
    lines: list[dict[str, Any]] = []
    with usage_scope() as usage:
        for name, given in (("clarified", row), ("orig", orig)):
            if given is None or given.answer is None:
                continue
            roles = cast(Roles, SimpleNamespace(search=GivenAnswer(given.answer), judge=judge))
            arm, line = await run_arm(given.query or "", gold, roles)
            arms[name] = arm
            lines.append({"id": row.id, "arm": name, **line})
    usage_now = {role: dict(u) for role, u in usage.items()}
    record = Record(id=row.id, k=k, clarified=arms.get("clarified"), orig=arms.get("orig"), usage=usage_now)
    return record, lines


async def _judge_all(
    inputs: Answers, judge: Judge, k: int, job_dir: Path, judge_name: str, concurrency: int, tracer: Any
) -> tuple[list[Record], str]:
    """Judge every answer not yet in the job dir, committing each as it finishes; the records and the stop reason.

    The job's own commit loop (:func:`cts.protocol.streaming.drain`): the spend limit, an open circuit or a
    rejected request stops it cleanly with what finished kept; a resume judges the rest.
    """
    gold = inputs.dataset.gold
    finished = {record_key(r): r for r in read_records(job_dir / RECORDS_FILE)}
    origs = {r.id: r for r in inputs.orig.rows} if inputs.orig else {}
    by_id: dict[str, Instance] = {i.id: i for i in inputs.dataset.instances}
    todo = [r for r in inputs.answers.rows if (r.id, 0) not in finished]

    async def one(row: Output) -> tuple[Record, list[dict[str, Any]]]:
        record, lines = await judge_row(row, origs.get(row.id), gold[row.id], judge, k)
        return replace(record, models={"judge": judge_name}), lines

    def hook(record: Record, lines: list[dict[str, Any]]) -> None:
        if tracer is not None and record.id in by_id:
            call_hook(tracer, by_id[record.id], gold[record.id], record, lines)

    n = len(inputs.answers.rows)
    bar = tqdm(total=n, initial=n - len(todo), desc="score", unit="q")
    with JobSink(job_dir) as sink:
        try:
            stop = await drain(bounded(map(one, todo), concurrency), sink, finished, bar, lambda r: r, hook)
        finally:
            bar.close()
    return list(finished.values()), stop


@task(compose_score_answers, read=read_answers, calls=("judge",))
def score_answers_task(
    *,
    inputs: Answers,
    judge: Judge,
    run: RunInfo,
    protocol: EvalProtocol,
    execution: Execution,
) -> float | None:
    """Judge every answer (and orig answer) against the gold; write and track the job.

    Args:
        inputs: The dataset and the answer files (:func:`read_answers`).
        judge: The judge (``judge=...``: lexical, a registry model, a panel).
        run: Where the job sits and how it is tracked.
        protocol: The budget recorded (the answers' file name's, else ``k``), the seed and the
            ``bootstrap`` of the delta's interval.
        execution: The spend limit, instances judged at once, and the judge's model id
            or class (``models["judge"]``, recorded with every instance).

    Returns:
        The mean restore_score_100 of the answers.
    """
    ctx, k, concurrency = run.context, protocol.k, execution.concurrency
    judge_name = execution.models.get("judge", type(judge).__name__)
    tracer = instance_tracer(run)
    system = {"cts.system": inputs.system} if inputs.system else {}
    with tracking.open_mlflow_run(
        tracking.Experiment(run.tracking.uri, run.tracking.experiment, run.tracking.experiment_kind),
        f"score:{inputs.answers.path.stem}",
        tracking.flatten(dict(run.config)),
        {**run.tags, "cts.source": "score_answers", **system},
        job_dir=ctx.job_dir,
    ) as run_id:
        write_config(run)
        if tracer is not None:
            tracer.attach(run_id, run.tracking.uri)
        records, stop = run_within_spend_limit(
            lambda: _judge_all(inputs, judge, k, ctx.job_dir, judge_name, concurrency, tracer),
            ctx.job_dir,
            execution.spend_limit,
        )
        metrics = {
            **summarize(records, k=k, resampling=protocol.resampling),
            **dataset_metrics(inputs.dataset),
            "n_answers": float(len(inputs.answers.rows)),
        }
        if tracer is not None:
            tracking.flush_traces(run.tracking.uri)
        extra = {"answers": str(inputs.answers.path), "orig_answers": str(inputs.orig.path) if inputs.orig else None}
        log_job_outputs(run, k, metrics, run_id, stop, extra)
        print_metrics(f"score_answers {inputs.answers.path.name} (judge {judge_name})", metrics)
        if stop != "done":
            print(f"stopped: {stop}; the same command resumes with hydra.run.dir={ctx.job_dir}", flush=True)
    return metrics["score_mean"]
