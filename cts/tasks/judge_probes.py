"""Task ``judge_probes``: the judge probes of :mod:`cts.analysis.judge_probes` over a finished sweep's answers,
and the anchor probes of :mod:`cts.analysis.anchors` over the dataset's gold.

    python run.py experiment=judge_probes probes.source=outputs/multirun/<date>            # the lexical judge
    python run.py experiment=judge_probes probes.source=outputs/multirun/<date> judge=gpt  # a registry model
    python run.py experiment=judge_probes 'probes.run=[empty,gold]' judge=gpt               # anchors only: no source

No clarify or search call is made; the judge is called once per answer and probe (and once for the
baseline), and twice per instance for the anchors (``probes.anchor_instances`` of them; null: all).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cts._util.loops import run as run_loop
from cts.analysis.anchors import ANCHORS, anchor_rows, anchor_scores, anchor_table
from cts.analysis.common import select_budgets, write_metrics, write_tables
from cts.analysis.judge_probes import PROBES, Probing, probe_all, probe_metrics, probe_rows, probe_table
from cts.analysis.judge_robustness import frozen_arms
from cts.core.contracts import Judge
from cts.core.errors import ConfigError
from cts.core.types import Gold
from cts.report.jobs import load_jobs
from cts.report.tables import markdown
from cts.stats.bootstrap import DEFAULT_RESAMPLING, Resampling
from cts.tasks.job import Analysis, RunInfo, log_task_outputs, tracked_task
from cts.tasks.registry import TaskContext, task

_ANCHOR_COLS = ("score", "score_ci_low", "score_ci_high")


@dataclass(frozen=True)
class ProbeSettings:
    """Which probes run, how, and the intervals of their tables (``probes.*``, ``seed``, ``bootstrap``).

    Attributes:
        probes: Which probes (``shuffle``, ``pad``, ``repeat``; the anchors ``empty``, ``gold``).
        pad_ratio: Length of the padding over the answer's.
        repeat: The repeat index the ``repeat`` probe calls as (its own cache key).
        anchor_instances: The first N instances the anchors probe (None: all): of the source's, or of the gold.
        resampling: ``n_resamples`` and ``confidence`` of the CIs; its seed also seeds the shuffles and the
            padding choice (the config's one ``seed``).
    """

    probes: Sequence[str] = (*PROBES, *ANCHORS)
    pad_ratio: float = 1.0
    repeat: int = 1
    anchor_instances: int | None = None
    resampling: Resampling = DEFAULT_RESAMPLING


def compose_judge_probes(ctx: TaskContext) -> None:
    """Build the dataset's gold and the judge, then probe it (the composer of the task)."""
    probes = list(ctx.value("probes.run", default=[*PROBES, *ANCHORS]))
    source = ctx.value("probes.source", default=None)
    if source is None and set(probes) - set(ANCHORS):
        raise ConfigError(
            "error: probes.source: set it to a sweep dir (the shuffle, pad and repeat probes judge its answers), "
            "or run the anchors alone: 'probes.run=[empty,gold]'"
        )
    bootstrap = ctx.value("bootstrap")
    resampling = Resampling(
        int(bootstrap["n_resamples"]), float(bootstrap["confidence"]), int(ctx.value("seed", default=0))
    )
    judge_probes_task(
        gold=ctx.input().gold,
        judge=ctx.build("judge"),
        judge_name=str(
            ctx.value("probes.judge_name", default=None) or ctx.value("judge", "_target_").rsplit(".", 1)[-1]
        ),
        run=ctx.run,
        analysis=Analysis(
            source if source is not None else [],  # the anchors alone read no source
            Path(ctx.value("paths.output_dir")),
            ctx.value("probes.budgets", default=None),
            int(ctx.value("concurrency", default=8)),
        ),
        settings=ProbeSettings(
            probes,
            float(ctx.value("probes.pad_ratio", default=1.0)),
            int(ctx.value("probes.repeat", default=1)),
            ctx.value("probes.anchor_instances", default=None),
            resampling,
        ),
    )


@task(compose_judge_probes, calls=("judge",))
def judge_probes_task(
    *,
    gold: Mapping[str, Gold],
    judge: Judge,
    judge_name: str,
    run: RunInfo,
    analysis: Analysis,
    settings: ProbeSettings,
) -> None:
    """Probe ``judge`` on the frozen answers of the analysis's source and write the ``judge_probes`` table.

    Args:
        gold: The static gold of the source runs' dataset.
        judge: The judge to probe (the config's ``judge``).
        judge_name: Its name in the table.
        run: How the task's run is tracked.
        analysis: The source runs (``probes.source``, ``probes.budgets``), the table's dir, judge calls in flight.
        settings: Which probes, how, and the intervals of their tables.
    """
    boot, concurrency, out_dir = settings.resampling, analysis.concurrency, analysis.out_dir
    probes, seed, anchor_instances = settings.probes, boot.seed, settings.anchor_instances
    answer_probes = [p for p in probes if p not in ANCHORS]
    tables, metrics = [], {}
    probed = dict(gold)
    with tracked_task(run, "judge_probes"):  # an infrastructure failure stops the analysis: exit 1
        if answer_probes:
            jobs = select_budgets(load_jobs(analysis.source, run.tracking.uri), analysis.budgets)
            seen = {r.id for j in jobs for r in j.records}
            probed = {i: g for i, g in gold.items() if i in seen}  # the anchors on the sweep's instances too
            clusters = {i: c for j in jobs for i, c in j.clusters.items()}
            found = run_loop(
                probe_all(
                    frozen_arms(jobs), gold, judge, Probing(answer_probes, seed, settings.pad_ratio, settings.repeat),
                    concurrency=concurrency,
                )
            )  # fmt: skip
            rows = probe_rows(found, gold, clusters, boot)
            tables.append(probe_table(rows, judge_name, boot.confidence))
            metrics.update(probe_metrics(rows))
        if anchors := [p for p in probes if p in ANCHORS]:
            probed = dict(list(probed.items())[:anchor_instances])
            rows = anchor_rows(run_loop(anchor_scores(probed, judge, anchors, concurrency)), boot)
            tables.append(anchor_table(rows, judge_name, boot.confidence))
            metrics.update(
                {f"anchor_{c}.{r['probe']}": float(r[c]) for r in rows.to_dict("records") for c in _ANCHOR_COLS}
            )
        files = write_tables(tables, Path(out_dir), "judge_probes")
        files.append(write_metrics(metrics, Path(out_dir)))
        log_task_outputs(metrics, files)
    for table in tables:
        print(f"{table.caption}\n\n{markdown(table.display)}\n", flush=True)
