"""Hydra callbacks: tracking-store set-up before jobs, the sweep report after them."""

from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from cts import tracking

log = logging.getLogger(__name__)


class PrepareTrackingStore(Callback):
    """Create the MLflow schema once in the parent, before parallel jobs race to migrate it."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Called by Hydra in the launching process."""
        tracking.prepare_store(config.tracking.uri)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Single runs prepare the store too (harmless when it exists)."""
        tracking.prepare_store(config.tracking.uri)
