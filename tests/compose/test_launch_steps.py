"""A launch is its named steps in order, and a single run and a multirun walk the same ones."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode

from cts._util.launch import current_launch
from cts.compose.callbacks import LaunchCallbacks
from cts.compose.launch import steps

CONF = Path(__file__).resolve().parents[2] / "conf"
ORDER = ("check", "probe", "plan", "store", "run", "report")


def test_the_steps_are_check_probe_plan_store_run_report() -> None:
    assert tuple(s.name for s in steps.STEPS) == ORDER
    assert tuple(s.name for s in steps.before_jobs()) == ("check", "probe", "plan", "store")
    assert tuple(s.name for s in steps.after_jobs()) == ("report",)
    acts = {s.name: s.act for s in steps.STEPS}
    assert acts.pop("run") is None  # Hydra's launcher runs the jobs between the hooks
    assert acts == {
        "check": steps.check,
        "probe": steps.probe,
        "plan": steps.plan,
        "store": steps.store,
        "report": steps.report,
    }


def _recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool, int]]:
    """Replace every step's act with one that notes (step, multirun, jobs) instead of acting."""
    seen: list[tuple[str, bool, int]] = []

    def noting(name: str) -> Any:
        return lambda at: seen.append((name, at.launch.multirun, len(at.launch.jobs)))

    fakes = tuple(replace(s, act=noting(s.name)) if s.act else s for s in steps.STEPS)
    monkeypatch.setattr(steps, "STEPS", fakes)
    return seen


def _config(overrides: list[str], mode: RunMode) -> Any:
    loader = GlobalHydra.instance().config_loader()
    return loader.load_configuration("config", overrides, run_mode=mode)


def test_a_single_run_and_a_multirun_walk_the_same_steps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = _recorded(monkeypatch)
    common = ["experiment=offline", "tracking.instance_traces=false", f"tracking.uri=sqlite:///{tmp_path}/m.db"]
    callbacks = LaunchCallbacks()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        single = _config([*common, f"hydra.run.dir={tmp_path}/run"], RunMode.RUN)
        callbacks.on_run_start(single)
        assert callbacks.launch is not None and current_launch() is callbacks.launch
        callbacks.on_run_end(single, job_return=None)
        assert callbacks.launch is None and current_launch() is None
        sweep = _config([*common, "k=1,2", f"hydra.sweep.dir={tmp_path}/sweep"], RunMode.MULTIRUN)
        callbacks.on_multirun_start(sweep)
        callbacks.on_multirun_end(sweep)
    assert callbacks.launch is None and current_launch() is None
    walked = [name for name, _, _ in seen]
    without_run = [name for name in ORDER if name != "run"]
    assert walked == without_run + without_run  # the same steps, in the same order
    assert {(multirun, jobs) for _, multirun, jobs in seen[:5]} == {(False, 1)}  # what differs is data
    assert {(multirun, jobs) for _, multirun, jobs in seen[5:]} == {(True, 2)}


def test_a_step_that_stops_the_launch_ends_it_and_the_steps_after_it_do_not_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = _recorded(monkeypatch)
    fakes = steps.STEPS

    def refuse(at: steps.Launching) -> None:
        raise SystemExit(1)

    monkeypatch.setattr(steps, "STEPS", tuple(replace(s, act=refuse) if s.name == "probe" else s for s in fakes))
    callbacks = LaunchCallbacks()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        single = _config(["experiment=offline", "tracking.instance_traces=false"], RunMode.RUN)
        with pytest.raises(SystemExit):
            callbacks.on_run_start(single)
    assert [name for name, _, _ in seen] == ["check"]
    assert callbacks.launch is None and current_launch() is None
