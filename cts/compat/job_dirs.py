"""The other files of an older version's job dir, read in today's form: ``summary.json``, ``traces.jsonl``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

OLD_STOP_REASONS: Mapping[str, str] = {"budget": "spend_limit"}
"""Stop reasons (``summary.json``, the MLflow tag ``stop_reason``) as older versions wrote them -> today's."""


def stop_reason(reason: str) -> str:
    """A job's stop reason in today's names (older jobs say ``budget`` for ``spend_limit``)."""
    return OLD_STOP_REASONS.get(reason, reason)


def factors_from_run_name(run_name: str) -> dict[str, str]:
    """Factors of a job dir written before summaries kept overrides: split from its run name.

    The run name joins ``key=value`` with ``,`` after making it path-safe, so it is not
    Hydra syntax; a segment without ``=`` belongs to the value before it.
    """
    out: dict[str, str] = {}
    last = None
    for item in run_name.split(","):
        if "=" in item:
            last, value = item.split("=", 1)
            out[last.lstrip("+~")] = value
        elif last is not None:
            out[last] += f",{item}"
    return out


def timed_trace_line(line: Mapping[str, Any] | None, elapsed_s: float) -> Mapping[str, Any]:
    """An instance's trace line with its window (``start_ns``, ``end_ns``).

    A line of an older version has no times (nor has a missing one): its window ends now and
    lasts the record's ``elapsed_s``.
    """
    if line and "start_ns" in line:
        return line
    end = time.time_ns()
    return {**(line or {}), "start_ns": end - int(elapsed_s * 1e9), "end_ns": end}
