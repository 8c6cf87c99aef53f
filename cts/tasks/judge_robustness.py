"""Task ``judge_robustness`` (paper Table 9); the analysis is :mod:`cts.analysis.judge_robustness`."""

from __future__ import annotations

from cts.analysis.common import select_budgets, write_metrics, write_tables
from cts.analysis.judge_robustness import judge_metrics, judge_report, rejudge
from cts.tasks.job import Build, log_task_run, robustness_source

import asyncio
from pathlib import Path
from typing import Any


from cts.report.jobs import load_jobs


from cts.report.tables import markdown



def judge_robustness_task(cfg: Any, services: Any, build: Build) -> None:
    """Task ``judge_robustness``: re-judge frozen answers with ``robustness.judges``.

    Reads ``robustness.source`` (sweep dir, job dirs or MLflow experiment),
    ``robustness.budgets`` (the k values to keep; None = all), ``robustness.judges``
    (name -> judge config), ``robustness.reference`` (default: the first judge) and
    ``robustness.include_recorded``; gold comes from ``cfg.dataset``. Writes tables
    to ``cfg.paths.output_dir``.
    """
    rcfg = cfg.robustness
    jobs = select_budgets(load_jobs(robustness_source(cfg), cfg.tracking.uri), rcfg.get("budgets"))
    gold = build(cfg.dataset).gold
    judges = {name: build(node) for name, node in rcfg.judges.items()}
    reference = rcfg.get("reference") or next(iter(judges))
    scores, labels = asyncio.run(rejudge(jobs, gold, judges, include_recorded=rcfg.get("include_recorded", True),
                                         concurrency=cfg.get("concurrency", 8)))
    out = Path(cfg.paths.output_dir)
    tables = judge_report(scores, labels, reference)
    scores.to_csv(out / "judge_scores.csv", index=False)
    files = write_tables(tables, out, "judge_robustness")
    metrics = judge_metrics(tables)
    files += [write_metrics(metrics, out), out / "judge_scores.csv"]
    log_task_run(cfg, "judge_robustness", metrics, files)
    print(markdown(tables[0].display), flush=True)
