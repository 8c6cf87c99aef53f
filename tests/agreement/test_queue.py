"""The review queue's draw: seeded, split evenly over the strata, uniform within each."""

from __future__ import annotations

import collections

import pytest

from cts.agreement.queue import draw, units
from tests.agreement.fakes import sweep


def test_the_draw_is_seeded_and_even_over_the_strata() -> None:
    jobs, _ = sweep(50)
    first = draw(jobs, 21, ["system", "k"], seed=4)
    assert first == draw(jobs, 21, ["system", "k"], seed=4)
    assert first != draw(jobs, 21, ["system", "k"], seed=5)
    per = collections.Counter(u.system for u in first)
    assert sorted(per.values()) == [10, 11] and len({(u.run_id, u.instance) for u in first}) == 21
    assert all(u.arms == ("clarified", "orig") for u in first)  # a trace with both answers: Δ vs orig needs both


def test_by_arm_each_shared_orig_answer_is_one_unit() -> None:
    jobs, _ = sweep(30)
    found = units(jobs, by_arm=True)
    assert collections.Counter(u.arms for u in found) == {("clarified",): 60, ("orig",): 30}
    drawn = draw(jobs, 30, ["system", "arm"], seed=0)
    assert collections.Counter((u.system, u.arms) for u in drawn) == {
        ("orig", ("orig",)): 10,
        ("rules_region", ("clarified",)): 10,
        ("rules_scope", ("clarified",)): 10,
    }


def test_every_unit_is_drawn_about_equally_often() -> None:
    """Uniform within a stratum: what a prediction-powered estimate per system assumes."""
    jobs, _ = sweep(20)
    counts = collections.Counter((u.run_id, u.instance) for s in range(400) for u in draw(jobs, 10, ["system"], seed=s))
    assert len(counts) == 40
    assert max(counts.values()) / min(counts.values()) < 1.6  # each is drawn 100 times in expectation


def test_an_unknown_stratum_is_refused() -> None:
    jobs, _ = sweep(5)
    with pytest.raises(ValueError, match="unknown judge; choose from system, k, arm"):
        draw(jobs, 3, ["judge"])
