"""Hydra callbacks: tracking-store set-up before jobs, the sweep report after them."""

from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from cts import tracking

log = logging.getLogger(__name__)


_SWEEP_FUNCTIONS = ("range(", "choice(", "glob(", "interval(")


def swept_keys(overrides: list[str]) -> set[str]:
    """Top-level config keys that a multirun's overrides vary (``clarifier=gpt,claude`` -> clarifier)."""
    out = set()
    for item in overrides:
        key, _, value = item.partition("=")
        if "," in value or value.startswith(_SWEEP_FUNCTIONS):
            key = key.lstrip("+~").split("@")[-1]
            out.add(key.split("/")[0].split(".")[0])
    return out


class PrepareTrackingStore(Callback):
    """Create the MLflow schema once in the parent, before parallel jobs race to migrate it."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Called by Hydra in the launching process, before any job starts.

        The shared part of the sweep's config is pre-flighted here too, so a missing
        key of a fixed role stops the sweep before it launches; each job checks its
        own variant again before it runs.
        """
        from cts.app import preflight, task_groups

        swept = swept_keys(config.hydra.overrides.task)
        preflight(config, groups=tuple(g for g in task_groups(config) if g not in swept))
        tracking.prepare_store(config.tracking.uri)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Single runs prepare the store too (harmless when it exists)."""
        tracking.prepare_store(config.tracking.uri)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Build the paper-style sweep report and log it as a sweep-level run."""
        from cts.report import build_sweep_report, log_sweep_report

        if not config.get("sweep_report", True):
            return
        result = build_sweep_report(
            config.hydra.sweep.dir,
            n_resamples=config.stats.n_resamples,
            confidence=config.stats.confidence,
            seed=config.seed,
        )
        for error in result.errors:
            log.error("sweep report: %s", error)
        if result.ok:
            log_sweep_report(result, config.tracking.uri, config.tracking.experiment)
            log.info("sweep report written to %s", result.out_dir)
