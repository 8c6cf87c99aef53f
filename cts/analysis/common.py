"""Helpers shared by the analyses of frozen runs: bounded concurrency, budgets, writers, feedback on traces."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from cts import tracking
from cts.report.jobs import Job
from cts.report.tables import Table, markdown, write_table

log = logging.getLogger(__name__)

T = TypeVar("T")


async def bounded(calls: Iterable[Callable[[], Awaitable[T]]], concurrency: int) -> list[T]:
    """Await every call with at most ``concurrency`` in flight; results in call order."""
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with sem:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls)))


def write_tables(tables: Sequence[Table], out_dir: Path, title: str) -> list[Path]:
    """Write each table (CSV/MD/TeX) and one Markdown page ``<title>.md`` with all of them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [p for t in tables for p in write_table(t, out_dir)]
    page = out_dir / f"{title}.md"
    page.write_text(
        "\n".join([f"# {title}\n"] + [f"## {t.caption}\n\n{markdown(t.display)}" for t in tables]), encoding="utf-8"
    )
    return [*files, page]


def select_budgets(jobs: Sequence[Job], budgets: Sequence[int] | None) -> list[Job]:
    """The jobs whose k is in ``budgets`` (all jobs when None)."""
    if budgets is None:
        return list(jobs)
    chosen = [j for j in jobs if j.k in {int(b) for b in budgets}]
    if not chosen:
        raise ValueError(f"no source job has k in {list(budgets)}")
    return chosen


def write_metrics(metrics: Mapping[str, float], out_dir: Path) -> Path:
    """Write ``robustness_metrics.json`` (non-finite values as null)."""
    path = out_dir / "robustness_metrics.json"
    clean = {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}
    path.write_text(json.dumps(clean, indent=2, ensure_ascii=False), encoding="utf-8")
    return path


def feedback_on_traces(items: Iterable[tuple[str, str, tracking.Assessed]]) -> int:
    """Add each ``(run id, instance id, assessment)`` to that run's trace of the instance, where it has one.

    The analyses' own judges (or backbones) then sit beside the run's judge on the same
    per-instance trace, so their agreement is visible instance by instance in MLflow.

    Returns:
        How many assessments were logged (runs logged without traces have none to add to).
    """
    by_instance: dict[tuple[str, str], list[tracking.Assessed]] = {}
    for run_id, instance_id, assessed in items:
        by_instance.setdefault((run_id, instance_id), []).append(assessed)
    traces = tracking.trace_ids_of_runs([run_id for run_id, _ in by_instance])
    logged = 0
    for key, of_instance in by_instance.items():
        if key in traces:
            tracking.log_assessments(traces[key], of_instance)
            logged += len(of_instance)
    log.info("%d assessments added to %d traces", logged, len({k for k in by_instance if k in traces}))
    return logged
