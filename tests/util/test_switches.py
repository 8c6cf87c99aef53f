"""``plan=true`` is ``plan.enabled=true``: with a sub-key beside it, in either order, from run.py too."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from cts._util.switches import spell_out_switches
from cts.plan.calibrate import PlanSettings, plan_settings
from tests.conftest import REPO
from tests.prewarmed import run_script


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_hydra_alone_replaces_the_plan_node_with_the_bool() -> None:
    """The cause: the bool takes the node's place, so a sub-key after it has nowhere to go."""
    with pytest.raises(ConfigCompositionException, match="plan.calibration_n"):
        composed("plan=true", "plan.calibration_n=10")
    assert composed("plan.calibration_n=10", "plan=true").plan is True  # and one before it is lost


@pytest.mark.parametrize(
    "args",
    [
        ("plan=true", "plan.calibration_n=10"),
        ("plan.calibration_n=10", "plan=true"),
        ("plan.enabled=true", "plan.calibration_n=10"),
        ("plan=True", "plan.enabled=true", "plan.calibration_n=10"),  # the same value twice is no conflict
    ],
)
def test_both_spellings_compose_the_same_plan(args: tuple[str, ...]) -> None:
    assert plan_settings(composed(*spell_out_switches(args))) == PlanSettings(enabled=True, calibration_n=10)


def test_only_the_switch_itself_is_rewritten() -> None:
    args = ["--config-dir", "x", "-m", "k=1,2", "planner=a", "+plan.extra=1", "plan={enabled:true}", "plan=false"]
    assert spell_out_switches(args) == [*args[:-1], "plan.enabled=false"]
    assert spell_out_switches(["plan=true,false"]) == ["plan.enabled=true,false"]


def test_contradicting_spellings_are_one_error() -> None:
    with pytest.raises(ValueError, match=r"^plan=true and plan.enabled=false contradict each other"):
        spell_out_switches(["plan=true", "plan.calibration_n=3", "plan.enabled=false"])


def test_run_py_says_a_contradiction_or_a_bad_value_in_one_line(tmp_path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(REPO / "run.py"), "experiment=offline", f"hydra.run.dir={tmp_path}/r", *args]
        return run_script(command, cwd=tmp_path, timeout=120)

    contradiction = run("plan=true", "plan.enabled=false")
    assert contradiction.returncode == 1 and contradiction.stderr.strip().splitlines() == [
        "error: plan=true and plan.enabled=false contradict each other: give plan.enabled once"
    ]
    bad = run("plan=maybe", "plan.calibration_n=10")  # before: Hydra's "Could not override" and its hints
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        "error: plan.enabled: must be one of true, false (plan=true stands for plan.enabled=true), got 'maybe'"
    ]
    assert not (tmp_path / "r").exists()


def test_plan_only_is_a_forecast_that_stops() -> None:
    assert spell_out_switches(["-m", "plan=only", "k=1"]) == ["-m", "plan.enabled=true", "plan.then=stop", "k=1"]
    settings = plan_settings(composed(*spell_out_switches(["plan=only", "plan.calibration_n=2"])))
    assert settings == PlanSettings(enabled=True, calibration_n=2, then="stop") and settings.only
    assert not plan_settings(composed(*spell_out_switches(["plan=true"]))).only
    with pytest.raises(ValueError, match="contradict each other"):
        spell_out_switches(["plan=only", "plan.enabled=false"])
