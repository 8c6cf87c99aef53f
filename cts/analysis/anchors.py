"""Anchor probes of a judge, free of people: answers whose right score is known without asking anyone.

- ``empty``: an empty answer restores nothing, so it must score 0;
- ``gold``: the instance's own gold nuggets, their text joined one per line, restore everything,
  so it must score 100.

A judge that gives the empty answer more than ``empty_max`` or the gold answer less than
``gold_min`` (mean restore_score_100 over the instances probed) cannot tell an answer from none,
and every score it gives measures nothing. ``experiment=judge_probes`` reports both with their
CIs; the pre-flight (:mod:`cts.compose.anchor_check`) runs them on a few instances before an LLM
judge is paid for a sweep.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from cts.analysis.common import bounded
from cts.core.contracts import Judge
from cts.core.records import infra_stop
from cts.core.scoring import restore_score
from cts.core.types import Gold
from cts.report.tables import Table
from cts.stats.bootstrap import DEFAULT_RESAMPLING, Resampling, mean_ci

log = logging.getLogger(__name__)

ANCHORS = ("empty", "gold")
EXPECTED = {"empty": 0.0, "gold": 100.0}
NAN = float("nan")

__all__ = [
    "ANCHORS",
    "AnchorLimits",
    "anchor_answer",
    "anchor_problems",
    "anchor_rows",
    "anchor_scores",
    "anchor_table",
]


@dataclass(frozen=True)
class AnchorLimits:
    """The credits a judge may give: at most ``empty_max`` to the empty answer, at least ``gold_min`` to gold."""

    empty_max: float = 10.0
    gold_min: float = 90.0


def anchor_answer(anchor: str, gold: Gold) -> str:
    """The answer of an anchor probe for one instance."""
    if anchor == "empty":
        return ""
    if anchor == "gold":
        return "\n".join(n.text for n in gold.nuggets)
    raise ValueError(f"unknown anchor probe {anchor!r}; choose from {', '.join(ANCHORS)}")


async def anchor_scores(
    gold: Mapping[str, Gold], judge: Judge, anchors: Sequence[str] = ANCHORS, concurrency: int = 8
) -> dict[str, list[tuple[str, float]]]:
    """Per anchor, ``(instance, restore_score_100)`` of every instance in ``gold`` the judge labelled.

    A call whose reply stays invalid is left out (logged); an infrastructure failure raises.
    """
    ids = [i for i, g in gold.items() if g.nuggets]

    def call(instance: str, anchor: str) -> Callable[[], Awaitable[float | None]]:
        async def run() -> float | None:
            try:
                labels = await judge.judge(anchor_answer(anchor, gold[instance]), list(gold[instance].nuggets))
            except Exception as e:  # noqa: BLE001 - an unscored item is left out, never 0...
                if infra_stop(e):
                    raise  # ...but a dead endpoint or the spend limit stops the probes
                log.warning("judge failed on %s (%s anchor): %s", instance, anchor, e)
                return None
            return restore_score(labels, gold[instance].nuggets)

        return run

    out = {}
    for anchor in anchors:
        found = await bounded([call(i, anchor) for i in ids], concurrency)
        out[anchor] = [(i, s) for i, s in zip(ids, found) if s is not None]
    return out


def anchor_rows(
    scores: Mapping[str, Sequence[tuple[str, float]]],
    resampling: Resampling = DEFAULT_RESAMPLING,
) -> pd.DataFrame:
    """Per anchor: instances, the mean score with its bootstrap CI, the score it must have."""
    rows = []
    for anchor, items in scores.items():
        mean, low, high = mean_ci([s for _, s in items], resampling)
        rows.append(
            {
                "probe": anchor,
                "n_answers": float(len(items)),
                "score": mean,
                "score_ci_low": low,
                "score_ci_high": high,
                "expected": EXPECTED[anchor],
            }
        )
    return pd.DataFrame(rows)


def anchor_problems(rows: pd.DataFrame, limits: AnchorLimits) -> list[str]:
    """What is wrong with the judge's anchor scores (nothing: an empty list)."""
    problems = []
    for r in rows.to_dict("records"):
        score = float(r["score"])
        if not math.isfinite(score):
            problems.append(f"no valid label on the {r['probe']} answer")
        elif r["probe"] == "empty" and score > limits.empty_max:
            problems.append(f"an empty answer scored {score:.2f}, at most {limits.empty_max:g} allowed")
        elif r["probe"] == "gold" and score < limits.gold_min:
            problems.append(f"the gold nuggets' own text scored {score:.2f}, at least {limits.gold_min:g} needed")
    return problems


def anchor_table(rows: pd.DataFrame, judge: str, confidence: float) -> Table:
    """The ``judge_anchors`` table: each anchor's mean score with its CI beside the score it must have."""
    level = f"{confidence:.0%} CI"

    def ci(r: Mapping[str, float]) -> str:
        vals = [r["score"], r["score_ci_low"], r["score_ci_high"]]
        shown = ["–" if not math.isfinite(v) else f"{v:.2f}" for v in vals]
        return f"{shown[0]} [{shown[1]}, {shown[2]}]"

    display = pd.DataFrame(
        [
            {
                "Probe": r["probe"],
                "answers": int(r["n_answers"]),
                f"score [{level}]": ci(r),
                "must be": f"{r['expected']:g}",
            }
            for r in rows.to_dict("records")
        ]
    )
    caption = (
        f"Anchor probes ({judge}): restore_score_100 of an empty answer (must be 0) and of the gold nuggets' own "
        "text joined (must be 100); CIs over instances"
    )
    return Table("judge_anchors", caption, rows, display)
