"""The region/unknown pattern: rates known by construction from scripted roles, and people's own answers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cts.core.types import UNKNOWN, Instance
from cts.data.clariq import load_clariq
from cts.realism.pattern import human_turns, pattern_row, run_turns
from cts.roles.qtyper import LexiconQuestionTyper
from tests.realism.files import write_clariq

REGION, TIME, SCOPE = "Which region do you mean?", "Which year do you mean?", "Which sense do you mean?"


class Clarifier:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    async def ask(self, blurred_query: str, k: int) -> list[str]:
        self.calls.append((blurred_query, k))
        return [REGION, TIME, SCOPE][:k]


class UA:
    """Knows a year in every intent, a region in none, a sense only in 'b'."""

    async def answer(self, fused_query: str, question: str) -> str:
        if question == TIME:
            return "1990"
        if question == SCOPE and fused_query == "b":
            return "the film"
        if question == SCOPE and fused_query == "c":
            raise RuntimeError("the call failed")
        return UNKNOWN


def test_pattern_rates_by_construction():
    instances = [Instance("1", "q", "a"), Instance("2", "q", "b"), Instance("3", "r", "c")]
    clarifier = Clarifier()
    turns = run_turns(clarifier, UA(), LexiconQuestionTyper(), instances, (1, 2, 3))
    assert sorted(clarifier.calls) == [("q", 1), ("q", 2), ("q", 3), ("r", 1), ("r", 2), ("r", 3)]  # once per (q, k)
    row = pattern_row(turns)
    assert row["n_questions_k1"] == 3 and row["cq_region_rate"] == 1.0 and row["n_region_only"] == 3
    assert row["ua_unknown_rate"] == row["region_only_unknown"] == 1.0
    assert math.isnan(row["other_unknown"])
    # over every k: 9 region questions (all unknown), 6 time (known), 3 scope (known for 'b', failed for 'c')
    assert row["failed_turns"] == 1
    assert row["region_only_unknown_all_k"] == 1.0 and row["other_unknown_all_k"] == pytest.approx(1 / 8)
    assert row["all_unknown_k1"] == 1.0 and row["all_unknown_k2"] == 0.0 and row["all_unknown_k3"] == 0.0


def test_people_rates_from_their_answers(tmp_path: Path):
    d = load_clariq(str(write_clariq(tmp_path / "train.tsv")))
    row = pattern_row(human_turns(d, LexiconQuestionTyper()))
    # 7 answered pairs; region-only questions: "which country ..." (x2) and 您问的是哪个地区 (x1)
    assert row["n_questions_k1"] == 7 and row["n_region_only"] == 3
    assert row["region_only_unknown"] == pytest.approx(1 / 3)  # "i dont know" to one of them
    assert row["other_unknown"] == pytest.approx(2 / 4)  # "no" to pet shops, 不知道 to history
