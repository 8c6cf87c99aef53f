"""A launch's checks copy each job's config once: the task's keys, kept in the pre-flight memo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from cts._util.launch import Preflight
from cts.compose.checks import preflight_problems_of
from cts.compose.errors import missing_values
from cts.compose.probes import probe_endpoints, scoped_copy, task_groups

CONF = Path(__file__).resolve().parents[2] / "conf"
STACK = ["clarifier=gpt", "ua=ernie", "rewriter=qwen", "judge=claude", "extractor=deepseek"]


def composed(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The keys of every ``OmegaConf.masked_copy`` made while the test runs."""
    made: list[list[str]] = []
    masked_copy = OmegaConf.masked_copy

    def counted(conf: Any, keys: Any) -> Any:
        made.append(list(keys))
        return masked_copy(conf, keys)

    monkeypatch.setattr(OmegaConf, "masked_copy", counted)
    return made


def test_the_pre_flight_and_the_probe_share_one_copy_per_job(copies: list[list[str]]) -> None:
    jobs = [composed([*STACK, "services.llm.api_base=http://127.0.0.1:9", f"k={k}"]) for k in (1, 2)]
    jobs = [OmegaConf.merge(j, {"services": {"llm": {"preflight_probe": False}}}) for j in jobs]
    memo = Preflight()
    for job in jobs:
        preflight_problems_of(job, task_groups(job), memo)
    probe_endpoints(jobs, memo)  # probing is off: nothing is sent, the copies are still taken
    assert copies == [list(task_groups(jobs[0]))] * 2
    assert scoped_copy(jobs[0], memo) is scoped_copy(jobs[0], memo)


def test_the_pre_flight_with_a_memo_finds_what_it_finds_without() -> None:
    job = composed([*STACK, "+judge.treshold=0.5"])  # a typo no component accepts
    found = preflight_problems_of(job, task_groups(job), Preflight())
    assert found == preflight_problems_of(job, task_groups(job))
    assert any(p.startswith("judge.treshold:") for p in found), found


def test_missing_values_walk_the_config_in_place(copies: list[list[str]]) -> None:
    job = composed([*STACK, "+dataset.path=???"])
    rest = [str(k) for k in job if k != "hydra"]
    found = missing_values(job, exclude=("hydra",))
    assert copies == [] and found == missing_values(OmegaConf.masked_copy(job, rest))
    assert any(line.startswith("dataset.path:") for line in found), found


def test_a_job_the_launch_checked_is_not_checked_again_by_its_run(tmp_path: Path) -> None:
    from hydra.core.hydra_config import HydraConfig

    from cts._util.launch import Launch
    from cts.compose.app import checked_by_launch

    job, other = composed([*STACK, "k=2"]), composed([*STACK, "k=3"])
    launch = Launch.begin(str(tmp_path), multirun=True)
    try:
        HydraConfig.instance().set_config(job)  # as Hydra sets it for the job's run
        with launch.bound():
            assert not checked_by_launch()  # another job's checks do not count
            launch.preflight.checked.add(tuple(job.hydra.overrides.task))
            assert checked_by_launch()
            HydraConfig.instance().set_config(other)
            assert not checked_by_launch()
        HydraConfig.instance().set_config(job)
        assert not checked_by_launch()  # no launch (a joblib or Slurm worker): the run checks
    finally:
        HydraConfig.instance().cfg = None
