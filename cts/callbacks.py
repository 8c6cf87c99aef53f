"""Hydra callbacks: tracking-store set-up before jobs, the sweep report after them."""

from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from cts import tracking

log = logging.getLogger(__name__)


def sweep_job_configs(config: DictConfig) -> list[DictConfig]:
    """The composed config of every job the sweep will launch, without launching any.

    Expands the command line's sweep overrides the way Hydra's basic sweeper does and
    composes each job's config with Hydra's own loader, so the pre-flight sees e.g.
    ``clarifier=gpt`` as well as ``clarifier=claude`` before the first job starts.
    Falls back to the shared config if Hydra's (internal) API is unavailable.
    """
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
        batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
        loader = GlobalHydra.instance().config_loader()
        return [loader.load_sweep_config(config, list(job)) for batch in batches for job in batch]
    except ImportError:  # pragma: no cover - a Hydra without these internals
        log.warning("cannot expand the sweep for the pre-flight; checking the shared config only")
        return [config]


class PrepareTrackingStore(Callback):
    """Create the MLflow schema once in the parent, before parallel jobs race to migrate it."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Called by Hydra in the launching process, before any job starts.

        The shared part of the sweep's config is pre-flighted here too, so a missing
        key of a fixed role stops the sweep before it launches; each job checks its
        own variant again before it runs.
        """
        from cts.app import preflight_problems_of, stop_on_problems, task_groups

        jobs = sweep_job_configs(config)
        stop_on_problems([p for job in jobs for p in preflight_problems_of(job, task_groups(job))])
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
