"""The spend limit before the main run: what the sweep may cost in all, against ``services.llm.spend.max_usd``."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cts.plan.calibrate import JobPlan, calibration_dir
from cts.plan.forecast import JobForecast

__all__ = ["dirs_spent", "slice_spent", "spend_over"]

log = logging.getLogger(__name__)


def dirs_spent(root: Path, jobs: Sequence[JobPlan]) -> float:
    """USD booked under ``root`` by the jobs' dirs (records and ledger, every run into them)."""
    from cts.protocol.spend import spent_so_far

    return sum(spent_so_far(root / j.name) for j in jobs)


def slice_spent(sweep_dir: Path, jobs: Sequence[JobPlan], source: str | None) -> float:
    """What the sweep's calibration slice booked: its own dirs, also when ``plan.source`` reads them again.

    ``plan.source`` pointing elsewhere (an earlier run) sent nothing for this sweep: $0.
    """
    own = calibration_dir(sweep_dir)
    if source and Path(source).resolve() != own.resolve():
        return 0.0
    return dirs_spent(own, jobs)


def spend_over(limit: Mapping[str, Any], forecast: JobForecast, spent: float, slice_usd: float) -> str | None:
    """Why the sweep is refused before its main run (None: it is within ``limit``, or there is no limit).

    The total is what the job dirs spent before (every earlier run into them) + what the
    calibration slice booked + the forecast's high end (with batched roles, at their batch prices:
    what the sweep will pay; the slice ran live and booked live prices). Nothing in it is counted twice: a reply
    is billed once, to the call that sent it, and a cache hit books $0. The slice's fresh calls
    are booked in its own dirs only (beside the sweep dir, never in a job dir); the main run
    replays them from the cache at $0, and the forecast counts the slice's runs as free
    (``JobSlice.n_free``). A forecast whose high end is not known (a job unknown, one run in
    the slice) cannot show the sweep fits: refused as well. The main run's running guard caps
    the job dirs' spend only; this check alone sees the slice's.
    """
    cap = limit.get("max_usd")
    if cap is None:
        return None
    cap = float(cap)
    usd, unpriced, prices = forecast.usd, forecast.unpriced, ""
    if forecast.batch is not None:  # what the sweep will pay: its batched roles at their batch prices
        usd, unpriced, prices = forecast.batch.usd, forecast.batch.unpriced, " (batch prices)"
    part = f" (priced models only; no price: {', '.join(unpriced)})" if unpriced else ""
    terms = [
        *([f"${slice_usd:.4f} spent by the calibration slice"] if slice_usd else []),
        *([f"${spent:.4f} spent in the job dirs before"] if spent else []),
    ]
    high = spent + slice_usd + (0.0 if forecast.unknown else usd.high)
    if forecast.unknown or forecast.incomplete or forecast.no_interval:
        reason = _unknown_high(forecast)
        total = f" = ${high:.4f}" if len(terms) > 1 else ""
        known = f"; what is known: {' + '.join(terms)}{total}" if terms else ""
        over = f"{reason}: it cannot show the sweep stays within services.llm.spend.max_usd ${cap:.4f}{known}"
        return over
    if high <= cap:
        if part:
            log.warning("plan: the forecast is within the spend limit for its priced models only%s", part)
        return None
    terms.insert(0, f"forecast high end{prices} ${usd.high:.4f}{part}")
    total = " + ".join(terms) + (f" = ${high:.4f}" if len(terms) > 1 else "")
    return f"{total} exceeds services.llm.spend.max_usd ${cap:.4f} by ${high - cap:.4f}"


def _unknown_high(forecast: JobForecast) -> str:
    if forecast.unknown:
        return f"the forecast is unknown ({forecast.unknown})"
    if forecast.incomplete:
        return (
            f"the forecast is incomplete ({len(forecast.incomplete)} job(s) unknown: {', '.join(forecast.incomplete)})"
        )
    return f"the forecast's high end is unknown ({forecast.no_interval})"
