"""A panel of judges: every member labels every nugget; the panel's label aggregates theirs.

As Inspect's multi-model scoring panels, for a metric a reviewer can trust more than any one
judge: ``judge=panel 'judge/members=[ernie,gpt,claude]' judge.aggregate=majority``. The
members judge one answer concurrently; each member's labels are kept in the record
(``judge_members`` of the arm) and the job's metrics give their agreement
(:mod:`cts.protocol.panel`). Aggregates, per nugget:

- ``majority``: the label most members give; a tie goes to the lowest of the tied labels
  (:func:`cts.core.scoring.majority_label`: three members who all differ give ``none``);
- ``mean``: the label nearest the members' mean credit (1 / 0.5 / 0), a tie going down:
  ``full`` above 0.75, ``partial`` above 0.25, else ``none``;
- ``min``: the strictest member's label.

A member whose output stays invalid makes the panel's judgement fail the same way (the arm is
unscored): an aggregate over fewer members would be another metric.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from cts.core.contracts import Judge, PanelVerdict
from cts.core.scoring import BY_RANK, CREDIT, ORDINAL, majority_label
from cts.core.types import Label, Nugget

Aggregate = Literal["majority", "mean", "min"]

__all__ = ["AGGREGATES", "Aggregate", "PanelJudge", "mean_label", "min_label"]


def mean_label(labels: Sequence[Label]) -> Label:
    """The label nearest the mean credit of ``labels`` (ties to the lower label)."""
    credit = sum(CREDIT[x] for x in labels) / len(labels)
    return "full" if credit > 0.75 else "partial" if credit > 0.25 else "none"


def min_label(labels: Sequence[Label]) -> Label:
    """The lowest of ``labels`` (none < partial < full)."""
    return BY_RANK[min(ORDINAL[x] for x in labels)]


AGGREGATES: Mapping[str, Callable[[Sequence[Label]], Label]] = {
    "majority": majority_label,
    "mean": mean_label,
    "min": min_label,
}


class PanelJudge:
    """Labels each nugget by every member judge and aggregates their labels."""

    def __init__(self, members: Mapping[str, Judge], aggregate: Aggregate = "majority") -> None:
        """Args:
        members: Name -> judge (the options of ``judge/members``, built by the composition layer).
        aggregate: ``majority``, ``mean`` or ``min`` (see the module docstring).
        """
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}")
        if len(members) < 2:
            raise ValueError(f"a judge panel needs at least 2 members, got {list(members)}")
        bad = [name for name, m in members.items() if not callable(getattr(m, "judge", None))]
        if bad:
            raise ValueError(f"panel members {bad} are not judges; choose them with judge/members=[a,b,c]")
        self.members = dict(members)
        self.aggregate: Aggregate = aggregate

    async def judge_members(self, answer: str, nuggets: Sequence[Nugget]) -> PanelVerdict:
        """Every member's labels of one answer and the panel's aggregate of them."""
        found = await asyncio.gather(*(m.judge(answer, nuggets) for m in self.members.values()))
        members = dict(zip(self.members, found))
        combine = AGGREGATES[self.aggregate]
        labels = {n.id: combine([m[n.id] for m in found]) for n in nuggets}
        return PanelVerdict(labels, members)

    async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]:
        """The panel's label per nugget id."""
        return dict((await self.judge_members(answer, nuggets)).labels)
