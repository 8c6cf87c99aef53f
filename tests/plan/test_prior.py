"""The slice's cost said before it runs: the registry's prices times the prompts' sizes, as bounds."""

from __future__ import annotations

from hydra import compose, initialize_config_dir

from cts.compose.app import task_groups
from cts.plan.prior import slice_cost, slice_cost_line
from tests.conftest import REPO


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_the_paper_stack_s_slice_has_a_least_and_a_most_cost() -> None:
    cfg = composed("clarifier=gpt", "k=2")
    one, three = (slice_cost([cfg], [task_groups(cfg)], [n]) for n in (1, 3))
    assert 0 < one.low < one.high and three.low == 3 * one.low and three.high == 3 * one.high  # type: ignore[operator]
    assert one.unpriced == ("webdancer",) and not one.unbounded  # self-hosted: $0, and said so
    k3 = composed("clarifier=gpt", "k=3")
    assert slice_cost([k3], [task_groups(k3)], [1]).high > one.high  # type: ignore[operator]  # more questions
    line = slice_cost_line(three, 3, 1, 0.0001)
    assert line.startswith("cts plan: calibration slice, 3 instance(s) per job (3 runs over 1 jobs): ")
    assert f"at least ${three.low:.4f} and at most ${three.high:.4f}" in line and "no price, counted as $0" in line
    assert "the spend limit will stop the slice, and the jobs it does not reach are forecast as unknown" in line
    assert "may stop it" in slice_cost_line(three, 3, 1, three.low * 2) and "spend" not in slice_cost_line(
        three, 3, 1, None
    )


def test_a_role_without_an_output_cap_has_no_bound() -> None:
    cfg = composed("clarifier=gpt", "clarifier.max_output_tokens=null")
    cost = slice_cost([cfg], [task_groups(cfg)], [2])
    assert cost.high is None and cost.unbounded == ("clarifier.model",)
    assert "at most no bound (clarifier.model: no output cap)" in slice_cost_line(cost, 2, 1, None)


def test_the_offline_stack_calls_no_model() -> None:
    cfg = composed("experiment=offline")
    cost = slice_cost([cfg], [task_groups(cfg)], [5])
    assert (cost.low, cost.high, cost.runs) == (0.0, 0.0, 5)
