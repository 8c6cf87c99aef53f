"""A job composed from a sibling is the config Hydra composes for it, job by job; and most jobs of a grid are."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

from cts.compose.launch.jobs import sweep_jobs
from cts.sweep import _compose
from tests.compositions import compose_counted

CONF = Path(__file__).resolve().parents[2] / "conf"


def _compositions(sweep: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any], int]:
    """Every job of ``sweep`` composed by a launch's :class:`ComposedJobs` and by Hydra itself, and how often Hydra composed."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", sweep, run_mode=RunMode.MULTIRUN)
        jobs = sweep_jobs(OverridesParser.create().parse_overrides(sweep))
        ours, calls = compose_counted(loader, master, jobs, monkeypatch)
        hydras = [loader.load_sweep_config(master, job) for job in jobs]
    return ours, hydras, len(calls)


def _plain(config: Any) -> Any:
    return OmegaConf.to_container(config, resolve=False)


def test_value_siblings_are_composed_once_and_equal_hydras_own(monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = [
        "experiment=offline",
        "clarifier=rules_scope,none",
        "k=1,2,3",
        "limit=3,null",
        "tracking.experiment=grid_one,'二'",
    ]
    ours, hydras, composed = _compositions(sweep, monkeypatch)
    assert len(ours) == 2 * 3 * 2 * 2
    assert composed == 2  # one per clarifier: the 22 others are made from a sibling
    for mine, theirs in zip(ours, hydras):
        assert _plain(mine) == _plain(theirs)
        assert mine.hydra.job.override_dirname == theirs.hydra.job.override_dirname
        assert (mine.k, mine.limit) == (theirs.k, theirs.limit)


def test_adds_deletes_and_collections_are_composed_by_hydra(monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = ["experiment=offline", "k=1,2", "+extra_key=1,2"]
    ours, hydras, composed = _compositions(sweep, monkeypatch)
    assert composed == 4
    assert [_plain(c) for c in ours] == [_plain(c) for c in hydras]
    sweep = ["experiment=offline", "k=1,2", "arms=[oracle],[withheld]"]
    ours, hydras, composed = _compositions(sweep, monkeypatch)
    assert composed == 4
    assert [_plain(c) for c in ours] == [_plain(c) for c in hydras]


def test_the_launcher_takes_a_jobs_config_without_a_copy_unless_siblings_are_made_from_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sweep = ["experiment=offline", "k=1,2"]
    copies: list[Any] = []
    real = copy.deepcopy
    monkeypatch.setattr(_compose, "copy", SimpleNamespace(deepcopy=lambda c: copies.append(c) or real(c)))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", sweep, run_mode=RunMode.MULTIRUN)
        first, second = sweep_jobs(OverridesParser.create().parse_overrides(sweep))
        composed = _compose.ComposedJobs()
        shown = [composed.compose(loader, master, job) for job in (first, second)]  # the pre-flight's copies
        copies.clear()
        taken = composed.take(loader, master, second)
        assert copies == []  # Hydra's run_job copies it: the launcher's copy is saved
        source = composed.take(loader, master, first)
        assert len(copies) == 1  # the second job was made from it: it stays in the memo
        again = composed.take(loader, master, second)  # forgotten once taken: made again, the same config
    assert _plain(taken) == _plain(shown[1]) == _plain(again) and taken is not again
    assert _plain(source) == _plain(shown[0])
