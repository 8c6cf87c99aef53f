"""What a launch checked and read before its jobs start, for the jobs it runs in its own process.

A launch is one ``python run.py`` (a single run, or a sweep from Hydra's ``on_multirun_start``
to its end). Its pre-flight probes each distinct endpoint and request once and reads each task
input once; a job of the launch run in the same process reuses that work instead of repeating
it. The state lives exactly as long as the launch (:func:`new_launch` starts a fresh one), so a
second sweep in one process (a notebook, a test session) probes its endpoints again. Jobs in
other processes (joblib, Slurm) start with an empty state and do the work themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LaunchState:
    """One launch's pre-flight results.

    Attributes:
        probed: ``(api_base, api_key)`` of every endpoint that answered ``GET /models``.
        completed: Keys of the minimal completions that succeeded (:mod:`cts.compose.completion_probe`).
        inputs: Task inputs read before the start, by their input key (:func:`cts.compose.app.preload_inputs`).
    """

    probed: set[tuple[str, str | None]] = field(default_factory=set)
    completed: set[str] = field(default_factory=set)
    inputs: dict[str, Any] = field(default_factory=dict)


_CURRENT: list[LaunchState] = [LaunchState()]


def launch_state() -> LaunchState:
    """The state of the running launch."""
    return _CURRENT[0]


def new_launch() -> LaunchState:
    """Start a launch with nothing checked or read yet (Hydra's run or multirun start)."""
    _CURRENT[0] = LaunchState()
    return _CURRENT[0]
