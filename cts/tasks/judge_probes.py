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
from pathlib import Path
from typing import Any

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
from cts.tasks.job import RunInfo, log_task_outputs, tracked_task
from cts.tasks.registry import TaskContext, task

_ANCHOR_COLS = ("score", "score_ci_low", "score_ci_high")


def compose_judge_probes(ctx: TaskContext) -> None:
    """Build the dataset's gold and the judge, then probe it (the composer of the task)."""
    probes = list(ctx.value("probes.run", default=[*PROBES, *ANCHORS]))
    source = ctx.value("probes.source", default=None)
    if source is None and set(probes) - set(ANCHORS):
        raise ConfigError(
            "error: probes.source: set it to a sweep dir (the shuffle, pad and repeat probes judge its answers), "
            "or run the anchors alone: 'probes.run=[empty,gold]'"
        )
    judge_probes_task(
        source=source,
        gold=ctx.input().gold,
        judge=ctx.build("judge"),
        judge_name=str(
            ctx.value("probes.judge_name", default=None) or ctx.value("judge", "_target_").rsplit(".", 1)[-1]
        ),
        probes=probes,
        anchor_instances=ctx.value("probes.anchor_instances", default=None),
        budgets=ctx.value("probes.budgets", default=None),
        pad_ratio=float(ctx.value("probes.pad_ratio", default=1.0)),
        repeat=int(ctx.value("probes.repeat", default=1)),
        seed=int(ctx.value("seed", default=0)),
        bootstrap=ctx.value("bootstrap"),
        run=ctx.run,
        out_dir=Path(ctx.value("paths.output_dir")),
        concurrency=int(ctx.value("concurrency", default=8)),
    )


@task(compose_judge_probes, calls=("judge",))
def judge_probes_task(
    *,
    source: str | Sequence[str] | None,
    gold: Mapping[str, Gold],
    judge: Judge,
    judge_name: str,
    probes: Sequence[str],
    run: RunInfo,
    out_dir: Path,
    bootstrap: Mapping[str, float],
    budgets: Sequence[int] | None = None,
    pad_ratio: float = 1.0,
    repeat: int = 1,
    seed: int = 0,
    concurrency: int = 8,
    anchor_instances: int | None = None,
) -> None:
    """Probe ``judge`` on the frozen answers of ``source`` and write the ``judge_probes`` table.

    Args:
        source: A sweep dir, job dirs, or an MLflow experiment name (``probes.source``).
        gold: The static gold of the source runs' dataset.
        judge: The judge to probe (the config's ``judge``).
        judge_name: Its name in the table.
        probes: Which probes (``shuffle``, ``pad``, ``repeat``; the anchors ``empty``, ``gold``).
        run: How the task's run is tracked.
        out_dir: Where the table goes.
        bootstrap: ``n_resamples`` and ``confidence`` of the CIs.
        budgets: The k values of the source jobs to keep (None = all).
        pad_ratio: Length of the padding over the answer's.
        repeat: The repeat index the ``repeat`` probe calls as (its own cache key).
        seed: Seed of the shuffles, the padding choice and the bootstrap.
        concurrency: Judge calls in flight at once.
        anchor_instances: The first N instances the anchors probe (None: all): of the source's, or of ``gold``.
    """
    boot: dict[str, Any] = {
        "n_resamples": int(bootstrap["n_resamples"]),
        "confidence": float(bootstrap["confidence"]),
        "seed": seed,
    }
    answer_probes = [p for p in probes if p not in ANCHORS]
    tables, metrics = [], {}
    probed = dict(gold)
    with tracked_task(run, "judge_probes"):  # an infrastructure failure stops the analysis: exit 1
        if answer_probes:
            jobs = select_budgets(load_jobs(source or [], run.tracking.uri), budgets)
            seen = {r.id for j in jobs for r in j.records}
            probed = {i: g for i, g in gold.items() if i in seen}  # the anchors on the sweep's instances too
            clusters = {i: c for j in jobs for i, c in j.clusters.items()}
            found = run_loop(
                probe_all(
                    frozen_arms(jobs), gold, judge, Probing(answer_probes, seed, pad_ratio, repeat),
                    concurrency=concurrency,
                )
            )  # fmt: skip
            rows = probe_rows(found, gold, clusters, **boot)
            tables.append(probe_table(rows, judge_name, boot["confidence"]))
            metrics.update(probe_metrics(rows))
        if anchors := [p for p in probes if p in ANCHORS]:
            probed = dict(list(probed.items())[:anchor_instances])
            rows = anchor_rows(run_loop(anchor_scores(probed, judge, anchors, concurrency)), **boot)
            tables.append(anchor_table(rows, judge_name, boot["confidence"]))
            metrics.update(
                {f"anchor_{c}.{r['probe']}": float(r[c]) for r in rows.to_dict("records") for c in _ANCHOR_COLS}
            )
        files = write_tables(tables, Path(out_dir), "judge_probes")
        files.append(write_metrics(metrics, Path(out_dir)))
        log_task_outputs(metrics, files)
    for table in tables:
        print(f"{table.caption}\n\n{markdown(table.display)}\n", flush=True)
