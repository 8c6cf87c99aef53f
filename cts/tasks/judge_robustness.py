"""Task ``judge_robustness`` (paper Table 9); the analysis is :mod:`cts.analysis.judge_robustness`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cts._util.loops import run as run_loop
from cts.analysis.common import (
    feedback_on_traces,
    select_budgets,
    write_metrics,
    write_tables,
)
from cts.analysis.judge_robustness import (
    judge_feedback,
    judge_metrics,
    judge_report,
    rejudge,
)
from cts.core.contracts import Judge
from cts.core.types import Gold
from cts.report.jobs import load_jobs
from cts.report.tables import markdown
from cts.tasks.job import Analysis, RunInfo, log_task_outputs, tracked_task
from cts.tasks.registry import TaskContext, task


def robustness_arguments(ctx: TaskContext) -> dict[str, Any]:
    """The arguments both robustness analyses share: the run, and the :class:`Analysis` (``robustness.source`` ...)."""
    analysis = Analysis(
        ctx.value("robustness.source"),
        Path(ctx.value("paths.output_dir")),
        ctx.value("robustness.budgets", default=None),
        ctx.value("concurrency", default=8),
    )
    return {"run": ctx.run, "analysis": analysis}


def compose_judge_robustness(ctx: TaskContext) -> None:
    """Build the dataset's gold and the judges, re-judge the source runs (the composer of the task)."""
    judge_robustness_task(
        gold=ctx.input().gold,
        judges={name: ctx.build("robustness.judges", name) for name in ctx.keys("robustness.judges")},
        reference=ctx.value("robustness.reference", default=None),
        include_recorded=bool(ctx.value("robustness.include_recorded", default=True)),
        **robustness_arguments(ctx),
    )


@task(compose_judge_robustness, calls=("robustness",))
def judge_robustness_task(
    *,
    gold: Mapping[str, Gold],
    judges: Mapping[str, Judge],
    run: RunInfo,
    analysis: Analysis,
    reference: str | None = None,
    include_recorded: bool = True,
) -> None:
    """Task ``judge_robustness``: re-judge the frozen answers of finished runs with ``judges``.

    Args:
        gold: The static gold of the source runs' dataset.
        judges: Name -> built judge (``robustness.judges``).
        run: How the task's run is tracked (its tracking URI also finds an experiment source).
        analysis: The source runs (``robustness.source``, ``budgets``), the tables' dir, judge calls in flight.
        reference: The judge the others are compared with (None = the first).
        include_recorded: Also compare with the labels stored in the records.
    """
    jobs = select_budgets(load_jobs(analysis.source, run.tracking.uri), analysis.budgets)
    concurrency, out_dir = analysis.concurrency, analysis.out_dir
    reference = reference or next(iter(judges))
    with tracked_task(run, "judge_robustness"):  # an infrastructure failure stops the analysis: exit 1
        scores, labels = run_loop(
            rejudge(jobs, gold, judges, include_recorded=include_recorded, concurrency=concurrency)
        )
        feedback_on_traces(judge_feedback(jobs, gold, labels))  # each judge's score on the runs' instance traces
        out = Path(out_dir)
        tables = judge_report(scores, labels, reference)
        scores.to_csv(out / "judge_scores.csv", index=False)
        files = write_tables(tables, out, "judge_robustness")
        metrics = judge_metrics(tables)
        files += [write_metrics(metrics, out), out / "judge_scores.csv"]
        log_task_outputs(metrics, files)
    print(markdown(tables[0].display), flush=True)
