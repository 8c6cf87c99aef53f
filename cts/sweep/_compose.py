"""Compose each job's config of a sweep once per process.

Hydra composes every job of a multirun three times in the launching process: the
pre-flight (``cts.compose.callbacks``), the sweeper's ``validate_batch_is_legal`` and the
launcher. Composition is the slow part of starting a sweep (about a quarter of a
second per job here), so the first result is kept and later callers get a copy.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

_LOCK = threading.Lock()
_MEMO: dict[tuple[int, tuple[str, ...]], tuple[Any, DictConfig]] = {}


def compose_job(loader: Any, master: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """``loader.load_sweep_config(master, overrides)``, composed once per master config and overrides.

    Args:
        loader: Hydra's config loader.
        master: The sweep's config (the one the launching process composed).
        overrides: The job's overrides.

    Returns:
        A fresh copy: callers may change it (the launcher sets the job's id).
    """
    key = (id(master), tuple(overrides))
    with _LOCK:
        hit = _MEMO.get(key)
    if hit is None or hit[0] is not master:  # an id reused by another object is not a hit
        config = loader.load_sweep_config(master_config=master, sweep_overrides=list(overrides))
        with _LOCK:
            _MEMO[key] = (master, config)
        return copy.deepcopy(config)
    return copy.deepcopy(hit[1])


def forget_composed() -> None:
    """Drop every kept config (at the end of a sweep)."""
    with _LOCK:
        _MEMO.clear()


class MemoConfigLoader:
    """A Hydra config loader whose ``load_sweep_config`` goes through :func:`compose_job`.

    Everything else is delegated to the wrapped loader.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        """See :func:`compose_job`."""
        return compose_job(self.inner, master_config, sweep_overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
