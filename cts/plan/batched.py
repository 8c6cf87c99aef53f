"""The forecast of a sweep whose roles go through Batch APIs (``services.llm.batch.roles``).

The calibration slice runs live (a batch may take its whole window; :mod:`cts.plan.calibrate`
turns batching off for it), so its records hold what every role's calls took, in tokens, at
live prices. The sweep books a batched call at its model's batch price
(:func:`cts.llm._batched.batch_prices`) and sends it in a batch, not as a live request: from
each record's usage rows and each role's model spec, :func:`repriced` gives what a run pays
with its batched roles at batch prices (``usd_batch``) and the requests the other roles send
(``calls_live``). A run's batched stages wait on each other (:func:`batched_stages`), each up
to the batch window, so the wall time in batch mode is the live part's, plus that many
turnarounds: :func:`live_part_wall` forecasts the live part, and nothing here guesses how
long a batch takes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cts.core.stages import QTYPER, REWRITE, SEARCH, before_search, stages
from cts.plan.forecast import JobSlice

__all__ = [
    "Pipeline",
    "RoleRate",
    "agent_turns",
    "batched_stages",
    "live_steps",
    "pipeline_of",
    "rates_of",
    "repriced",
    "window_s",
]

Prices = tuple[float, float]


@dataclass(frozen=True)
class RoleRate:
    """How a batched role's fresh calls are priced in a batch.

    Attributes:
        prices: USD per input and output token (one batch price for every model of the role).
        factor: Else, the share of the live price every model of the role pays in a batch (e.g. 0.5).
        unknown: Else, why the batch price of the role's calls is not known (its models' discounts differ).
    """

    prices: Prices | None = None
    factor: float | None = None
    unknown: str = ""


def rates_of(prices: Sequence[tuple[str, Prices, Prices]], batched: Sequence[str]) -> dict[str, RoleRate]:
    """Per batched role: its :class:`RoleRate`, from ``(role, live prices, batch prices)`` of each model spec.

    A role without a spec of its own (``visit_summary`` on the agent's model) takes the one
    batch price every spec of the job shares; when they differ, its batch price is unknown.
    """
    by_role: dict[str, list[tuple[Prices, Prices]]] = {}
    for role, live, batch in prices:
        by_role.setdefault(role, []).append((live, batch))
    every = [p for pairs in by_role.values() for p in pairs]
    return {role: _rate(role, by_role.get(role) or every) for role in batched}


def _rate(role: str, pairs: Sequence[tuple[Prices, Prices]]) -> RoleRate:
    batch = {b for _, b in pairs}
    if len(batch) == 1:
        return RoleRate(prices=batch.pop())
    factors = {round(b / p, 12) for live, bat in pairs for p, b in zip(live, bat, strict=True) if p}
    if len(factors) == 1 and all(all(p or not b for p, b in zip(live, bat, strict=True)) for live, bat in pairs):
        return RoleRate(factor=factors.pop())
    return RoleRate(unknown=f"{role} (its models' batch discounts differ)")


def repriced(usage: Mapping[str, Mapping[str, float]], rates: Mapping[str, RoleRate]) -> tuple[float, float]:
    """``(usd_batch, calls_live)`` of one record's usage rows: batched roles at batch prices, the rest as booked.

    A batched role's fresh tokens at its batch price (the row's cost scaled by its factor when its
    models share one discount); a role whose batch price is unknown adds nothing (the forecast
    marks it unpriced, as a model without a price).
    """
    usd, calls = 0.0, 0.0
    for role, row in usage.items():
        rate = rates.get(role)
        if rate is None:
            usd += float(row.get("cost_usd", 0.0))
            calls += float(row.get("requests", 0.0))
        elif rate.prices is not None:
            usd += (
                float(row.get("tokens_in", 0.0)) * rate.prices[0] + float(row.get("tokens_out", 0.0)) * rate.prices[1]
            )
        elif rate.factor is not None:
            usd += float(row.get("cost_usd", 0.0)) * rate.factor
    return usd, calls


@dataclass(frozen=True)
class Pipeline:
    """What of a job's config orders its stages (:func:`cts.protocol.pipeline.run_instance`).

    Attributes:
        k: Questions per instance (turns, in sequential mode).
        sequential: ``clarifier.mode=sequential``: each turn asks, then waits for its answer.
        rewrite_arms: Attribution arms that rewrite (withheld, prefix) run after the clarified arm.
    """

    k: int = 1
    sequential: bool = False
    rewrite_arms: bool = False


def pipeline_of(job: DictConfig) -> Pipeline:
    """The job's :class:`Pipeline` from its composed config."""
    arms = OmegaConf.select(job, "arms", default=None) or []
    return Pipeline(
        int(job.get("k") or 1),
        OmegaConf.select(job, "clarifier.mode", default=None) == "sequential",
        any(str(a) != "oracle" for a in arms),
    )


def batched_stages(roles: Sequence[str], pipeline: Pipeline, turns: int) -> int:
    """Batch turnarounds on a run's critical path: its batched stages that wait on each other.

    A run clarifies (its stages before the search, :mod:`cts.core.stages`: the clarifier, then the
    UA's answers at once, or turn by turn when sequential, then the rewriter) while its orig arm searches and is judged; the clarified arm then searches
    and is judged; then the attribution arms that rewrite; the question typer last. A batched
    agent role adds a turnaround per agent turn (``turns``: the most of an arm in the slice).
    Stages that run at once share a turnaround (the orig arm's judge with the UA's answers).
    """
    batched = set(roles)
    turn_calls = pipeline.k if pipeline.sequential else 1
    clarify = sum(
        (turn_calls if s.per_turn else 1) for s in stages() if s.name in before_search() and s.role in batched
    )
    arm = turns + sum(1 for s in stages() if s.on_arm and s is not SEARCH and s.role in batched)
    rewrites = (REWRITE.role in batched) + arm if pipeline.rewrite_arms else 0
    return max(clarify, arm) + arm + rewrites + (QTYPER.role in batched)


def agent_turns(records: Sequence[Mapping[str, Any]], roles: Sequence[str]) -> int:
    """The most batched agent calls in a row of one arm in ``records``: its turns, and its visit summaries."""
    most = 0
    for record in records:
        arms = [record.get("clarified"), record.get("orig"), *(record.get("arms") or {}).values()]
        for arm in arms:
            summary = (arm or {}).get("trace_summary") or {}
            turns = int(summary.get("llm_calls") or 0)
            visits = min(turns, int(summary.get("visits") or 0))
            most = max(most, turns * ("search" in roles) + visits * ("visit_summary" in roles))
    return most


def window_s(window: str) -> float:
    """Seconds of a completion window (``24h``)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([hms])\s*", window)
    if not found:
        raise ValueError(f"services.llm.batch.window: not a duration: {window!r}")
    return float(found.group(1)) * {"h": 3600.0, "m": 60.0, "s": 1.0}[found.group(2)]


def live_steps(measured: Any, slices: Sequence[JobSlice]) -> Any:
    """``measured`` (:class:`cts.plan.walltime.Measured`) with each job's round trips per run less its batched stages."""
    steps = tuple(max(1, s - (j.batch.stages if j.batch else 0)) for s, j in zip(measured.steps, slices, strict=False))
    return replace(measured, steps=steps)
