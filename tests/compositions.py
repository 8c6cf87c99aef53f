"""Composing a sweep's jobs through a launch's compose memo, counting the full compositions Hydra runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from cts.sweep._compose import ComposedJobs


def compose_counted(
    loader: Any, master: Any, jobs: Sequence[list[str]], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[Any], list[list[str]]]:
    """Every job of ``jobs`` composed by one new :class:`ComposedJobs`, and the overrides of each full composition.

    A full composition is a call of Hydra's ``load_sweep_config``; a job made from a sibling is not one.
    """
    full: list[list[str]] = []
    real = type(loader).load_sweep_config

    def counted(self: Any, master_config: Any, sweep_overrides: list[str]) -> Any:
        full.append(sweep_overrides)
        return real(self, master_config, sweep_overrides)

    monkeypatch.setattr(type(loader), "load_sweep_config", counted)
    composed = ComposedJobs()
    ours = [composed.compose(loader, master, job) for job in jobs]
    monkeypatch.setattr(type(loader), "load_sweep_config", real)
    return ours, full
