"""Task ``backbone_stability`` (paper Table 11); the analysis is :mod:`cts.analysis.backbone_stability`."""

from __future__ import annotations

from cts.analysis.backbone_stability import (
    Backbone,
    Concretiser,
    frozen_items,
    replay_all,
    replayed_by_all,
    stability_metrics,
    stability_report,
    write_replays,
)
from cts.analysis.common import select_budgets, write_metrics, write_tables
import logging

from cts.lexicon import BUILTIN_PLACES_EN, BUILTIN_PLACES_ZH, corpus_places
from cts.tasks.job import Build, log_task_run, robustness_source

import asyncio
from pathlib import Path
from typing import Any


from cts.report.jobs import load_jobs


from cts.report.tables import markdown


log = logging.getLogger(__name__)


def backbone_stability_task(cfg: Any, services: Any, build: Build) -> None:
    """Task ``backbone_stability``: replay frozen questions with ``robustness.backbones``.

    Reads ``robustness.source``, ``robustness.budgets`` (the k values to keep; None =
    all) and ``robustness.backbones`` (name -> {ua, rewriter} config nodes);
    instances come from ``cfg.dataset``. Writes tables to ``cfg.paths.output_dir``.
    """
    jobs = select_budgets(load_jobs(robustness_source(cfg), cfg.tracking.uri), cfg.robustness.get("budgets"))
    dataset = build(cfg.dataset)
    items = frozen_items(jobs, dataset.instances)
    if not items:
        raise ValueError("the source runs have no clarification questions to replay")
    backbones = {
        name: Backbone(build(node.ua), build(node.rewriter))
        for name, node in cfg.robustness.backbones.items()
    }
    replays = asyncio.run(replay_all(items, backbones, cfg.get("concurrency", 8)))
    items, outputs = replayed_by_all(items, replays)
    n_failed = len(next(iter(replays.values()), [])) - len(items)
    tables = stability_report(items, outputs, Concretiser.from_places(place_lexicon(services)))
    out = Path(cfg.paths.output_dir)
    files = write_tables(tables, out, "backbone_stability")
    write_replays(items, outputs, out / "backbone_replays.jsonl")
    metrics = {**stability_metrics(tables), "n_items": float(len(items)), "n_failed_items": float(n_failed)}
    files += [write_metrics(metrics, out), out / "backbone_replays.jsonl"]
    log_task_run(cfg, "backbone_stability", metrics, files)
    print(markdown(tables[0].display), flush=True)


def place_lexicon(services: Any) -> tuple[str, ...]:
    """Built-in places plus the offline corpus's places when a corpus is available."""
    places = set(BUILTIN_PLACES_EN) | set(BUILTIN_PLACES_ZH)
    try:
        places |= set(corpus_places(services.corpus))
    except Exception as e:  # noqa: BLE001 - no corpus (package missing): the built-in list serves
        log.info("no corpus place lexicon (%s); using the built-in list", e)
    return tuple(sorted(p for p in places if len(p) >= 2))
