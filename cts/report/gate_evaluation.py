"""Post-hoc ask-or-not gating over finished records (no search, no judge call).

The gated system's score per instance is the clarified arm's where the gate
asked and the orig arm's where it did not, so any gate is evaluated over a
finished sweep by reading its records; only the gate's own calls are made (an
LLM gate's prompts; none for the rule, always, never and oracle gates).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cts._util.loops import run_sync
from cts.core.contracts import Decision, Gate, OutcomeGate
from cts.core.records import Record
from cts.protocol.repeats import instance_means
from cts.roles.gates import gate_kind
from cts.stats.bootstrap import DEFAULT_RESAMPLING, Resampling, paired_bootstrap_ci

NAN = float("nan")


def gateable(records: Sequence[Record]) -> list[Record]:
    """One record per instance where both arms are scored and the blurred query is known (the orig arm's query).

    Repeats are reduced first, as the job's metrics reduce them
    (:func:`cts.protocol.repeats.instance_means`): a gate decides once per instance, and ``n``
    and the CI count instances. The result is in id order, so the CI does not depend on the
    order the records finished in.
    """
    return [
        r for r in instance_means(records) if r.score is not None and r.orig_score is not None and r.orig is not None
    ]


async def decide_all(records: Sequence[Record], gate: Gate | OutcomeGate, concurrency: int = 8) -> dict[str, Decision]:
    """The gate's decision for every record, by instance id.

    A query gate sees ``r.orig.query`` (the blurred query ``q``) only; the oracle reads the record.
    """
    if gate_kind(gate) == "outcome":
        assert isinstance(gate, OutcomeGate)
        return {r.id: gate.decide_outcome(r) for r in records}
    assert isinstance(gate, Gate)
    todo = iter(enumerate(records))  # shared by the workers: each record is decided once
    decided: list[Decision | None] = [None] * len(records)

    async def worker() -> None:  # `concurrency` workers, not a task per record (a rule gate decides in µs)
        for i, r in todo:
            decided[i] = await gate.decide(r.orig.query if r.orig else "")

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(records)))))
    return {r.id: d for r, d in zip(records, decided) if d is not None}  # in record order, as gather's were


async def decide_each(batches: Sequence[tuple[Sequence[Record], Gate | OutcomeGate]]) -> list[dict[str, Decision]]:
    """:func:`decide_all` for each ``(records, gate)`` in turn, in one event loop (one gate's calls at a time)."""
    return [await decide_all(records, gate) for records, gate in batches]


@dataclass(frozen=True)
class GateResult:
    """How a gate does over one job's records."""

    n: int
    ask_rate: float
    score_mean: float
    """Mean gated restore score."""
    orig_mean: float
    always_mean: float
    delta_vs_orig: float
    delta_ci_low: float
    delta_ci_high: float
    delta_vs_always: float
    precision: float
    """Share of the gate's asks where the oracle asks too."""
    recall: float
    """Share of the oracle's asks the gate also makes."""
    questions_per_instance: float


def gated_scores(records: Sequence[Record], decisions: Mapping[str, Decision]) -> list[float]:
    """Per record: the clarified arm's score where the gate asked, else the orig arm's."""
    return [float(r.score if decisions[r.id].ask else r.orig_score) for r in records]  # type: ignore[arg-type]  # callers pass gateable() records: both scored


def _precision_recall(asks: Sequence[bool], oracle: Sequence[bool]) -> tuple[float, float]:
    both = sum(a and o for a, o in zip(asks, oracle))
    precision = both / sum(asks) if any(asks) else NAN
    recall = both / sum(oracle) if any(oracle) else NAN
    return precision, recall


def gate_result(
    records: Sequence[Record],
    decisions: Mapping[str, Decision],
    resampling: Resampling = DEFAULT_RESAMPLING,
) -> GateResult:
    """Gated score, deltas (paired CI vs orig), precision/recall vs the oracle, questions asked."""
    rs = gateable(records)
    if not rs:
        return GateResult(0, *([NAN] * 11))
    gated = gated_scores(rs, decisions)
    orig = [float(r.orig_score) for r in rs]  # type: ignore[arg-type]  # gateable: scored
    always = [float(r.score) for r in rs]  # type: ignore[arg-type]  # gateable: scored
    asks = [decisions[r.id].ask for r in rs]
    oracle = [s > o for s, o in zip(always, orig)]
    delta, low, high = paired_bootstrap_ci(gated, orig, resampling)
    precision, recall = _precision_recall(asks, oracle)
    asked_q = [len(r.questions) if a else 0 for r, a in zip(rs, asks)]
    return GateResult(
        n=len(rs),
        ask_rate=float(np.mean(asks)),
        score_mean=float(np.mean(gated)),
        orig_mean=float(np.mean(orig)),
        always_mean=float(np.mean(always)),
        delta_vs_orig=delta,
        delta_ci_low=low,
        delta_ci_high=high,
        delta_vs_always=float(np.mean(gated) - np.mean(always)),
        precision=precision,
        recall=recall,
        questions_per_instance=float(np.mean(asked_q)),
    )


def evaluate_gate(
    records: Sequence[Record],
    gate: Gate | OutcomeGate,
    resampling: Resampling = DEFAULT_RESAMPLING,
) -> tuple[GateResult, dict[str, Decision]]:
    """Decide for every gateable instance (repeats reduced, :func:`gateable`), then score the gated system.

    A synchronous wrapper of :func:`decide_all` and :func:`gate_result`.
    """
    return evaluate_gates([records], [gate], resampling)[0]


def evaluate_gates(
    record_sets: Sequence[Sequence[Record]],
    gates: Sequence[Gate | OutcomeGate],
    resampling: Resampling = DEFAULT_RESAMPLING,
) -> list[tuple[GateResult, dict[str, Decision]]]:
    """:func:`evaluate_gate` of each pair of ``record_sets`` and ``gates`` (aligned), deciding in one event loop.

    A report evaluates every gate on every job: one loop for them all, not one per pair.
    """
    sets = [gateable(records) for records in record_sets]
    decided = run_sync(decide_each(list(zip(sets, gates, strict=True))))
    return [(gate_result(rs, decisions, resampling), decisions) for rs, decisions in zip(sets, decided)]
