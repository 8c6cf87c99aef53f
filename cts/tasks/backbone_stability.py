"""Task ``backbone_stability`` (paper Table 11); the analysis is :mod:`cts.analysis.backbone_stability`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from cts._util.loops import run as run_loop
from cts.analysis.backbone_stability import (
    Backbone,
    Concretiser,
    backbone_feedback,
    frozen_items,
    replay_all,
    replayed_by_all,
    stability_metrics,
    stability_report,
    write_replays,
)
from cts.analysis.common import (
    feedback_on_traces,
    select_budgets,
    write_metrics,
    write_tables,
)
from cts.core.types import Instance
from cts.report.jobs import load_jobs
from cts.report.tables import markdown
from cts.tasks.job import Analysis, RunInfo, log_task_outputs, tracked_task
from cts.tasks.judge_robustness import robustness_arguments
from cts.tasks.registry import TaskContext, task


def compose_backbone_stability(ctx: TaskContext) -> None:
    """Build the dataset and the backbones, replay the source runs' questions (the composer of the task)."""
    node = "robustness.backbones"
    backbones = {
        name: Backbone(ctx.build(node, name, "ua"), ctx.build(node, name, "rewriter")) for name in ctx.keys(node)
    }
    backbone_stability_task(
        instances=ctx.input().instances, backbones=backbones, places=ctx.places(), **robustness_arguments(ctx)
    )


@task(compose_backbone_stability, calls=("robustness",))
def backbone_stability_task(
    *,
    instances: Sequence[Instance],
    backbones: Mapping[str, Backbone],
    places: Sequence[str],
    run: RunInfo,
    analysis: Analysis,
) -> None:
    """Task ``backbone_stability``: replay the frozen questions of finished runs with ``backbones``.

    Args:
        instances: The source runs' dataset.
        backbones: Name -> built UA and rewriter (``robustness.backbones``).
        places: The place lexicon that finds unsupported concretisations.
        run: How the task's run is tracked (its tracking URI also finds an experiment source).
        analysis: The source runs (``robustness.source``, ``budgets``), the dir of the tables and replays,
            replays in flight.
    """
    jobs = select_budgets(load_jobs(analysis.source, run.tracking.uri), analysis.budgets)
    concurrency, out_dir = analysis.concurrency, analysis.out_dir
    items = frozen_items(jobs, instances)
    if not items:
        raise ValueError("the source runs have no clarification questions to replay")
    with tracked_task(run, "backbone_stability"):  # an infrastructure failure stops the analysis: exit 1
        replays = run_loop(replay_all(items, backbones, concurrency))
        items, outputs = replayed_by_all(items, replays)
        feedback_on_traces(backbone_feedback(jobs, items, outputs))  # each backbone's replay on the instance traces
        n_failed = len(next(iter(replays.values()), [])) - len(items)
        tables = stability_report(items, outputs, Concretiser.from_places(places))
        out = Path(out_dir)
        files = write_tables(tables, out, "backbone_stability")
        write_replays(items, outputs, out / "backbone_replays.jsonl")
        metrics = {**stability_metrics(tables), "n_items": float(len(items)), "n_failed_items": float(n_failed)}
        files += [write_metrics(metrics, out), out / "backbone_replays.jsonl"]
        log_task_outputs(metrics, files)
    print(markdown(tables[0].display), flush=True)
