"""A launch's Hydra compositions read each config file once, and still compose Hydra's own configs."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import initialize_config_dir
from hydra._internal.config_repository import ConfigRepository
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict, read_write

from cts.compose.launch.jobs import sweep_jobs
from cts.sweep._compose import ComposedJobs
from cts.sweep._config_files import ConfigFiles
from tests.compositions import compose_counted

CONF = Path(__file__).resolve().parents[2] / "conf"
SWEEP = ["clarifier=gpt,rules_scope,none", "k=1,2,3"]
EXTRA = [["clarifier=ernie", "k=2", "+extra_key=1"], ["clarifier=rules_scope", "~seed"]]


@pytest.fixture
def hydra_loader() -> Iterator[tuple[Any, Any]]:
    """Hydra's loader and the sweep's config, as a multirun's launching process has them."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        yield loader, loader.load_configuration("config", SWEEP, run_mode=RunMode.MULTIRUN)


def _jobs() -> list[list[str]]:
    return [*sweep_jobs(OverridesParser.create().parse_overrides(SWEEP)), *EXTRA]


def _reads(loader: Any, monkeypatch: pytest.MonkeyPatch) -> collections.Counter[tuple[str, str]]:
    """Count the conf dir's file reads, by reading thread and config path."""
    reads: collections.Counter[tuple[str, str]] = collections.Counter()
    # Hydra's plugin scan imports its config sources' modules again: patch the class in use.
    (source,) = [s for s in loader.repository.get_sources() if s.provider == "main"]
    assert source.path == str(CONF) and type(source).__name__ == "FileConfigSource"
    real = type(source).load_config

    def counted(self: Any, config_path: str) -> Any:
        reads[(threading.current_thread().name, config_path)] += 1
        return real(self, config_path)

    monkeypatch.setattr(type(source), "load_config", counted)
    return reads


def _same(mine: Any, theirs: Any) -> None:
    assert OmegaConf.to_container(mine, resolve=False) == OmegaConf.to_container(theirs, resolve=False)
    assert OmegaConf.to_container(mine.hydra, resolve=False) == OmegaConf.to_container(theirs.hydra, resolve=False)
    assert mine.hydra.job.override_dirname == theirs.hydra.job.override_dirname


def test_every_job_equals_hydras_own_and_each_file_is_read_once(
    hydra_loader: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    loader, master = hydra_loader
    jobs = _jobs()
    reads = _reads(loader, monkeypatch)
    ours, full = compose_counted(loader, master, jobs, monkeypatch)
    mine = dict(reads)
    assert len(ours) == 11 and len(full) == 5  # one per clarifier, and the jobs with +key and ~key
    assert reads[("MainThread", "config")] == 1
    assert mine and max(mine.values()) == 1, {k: n for k, n in mine.items() if n > 1}
    hydras = [loader.load_sweep_config(master, job) for job in jobs]
    assert reads[("MainThread", "config")] == 1 + len(jobs)  # Hydra alone reads it for every composition
    for job, theirs in zip(ours, hydras):
        _same(job, theirs)
    assert "extra_key" in ours[-2] and "seed" not in ours[-1]


def _scribble(config: Any) -> None:
    """Change a composed config everywhere a loaded file left something."""
    with read_write(config), open_dict(config):
        config.clarifier["scribbled"] = 1
        config.dataset.clear()
        config.hydra.job_logging["version"] = 99
        config.hydra.overrides.task.append("scribbled=1")
        config.tracking["scribbled"] = [1]


def test_a_changed_config_changes_no_other_job(hydra_loader: tuple[Any, Any]) -> None:
    loader, master = hydra_loader
    composed = ComposedJobs()
    first = composed.compose(loader, master, ["clarifier=rules_scope", "k=1"])
    _scribble(first)
    jobs = [["clarifier=rules_scope", "k=1"], ["clarifier=rules_scope", "k=2"], ["clarifier=none", "k=1"], EXTRA[0]]
    later = [composed.compose(loader, master, job) for job in jobs]
    for job in later:
        _scribble(job)
    for job, config in zip(jobs, [composed.compose(loader, master, job) for job in jobs]):
        _same(config, loader.load_sweep_config(master, job))


def test_loaded_files_are_handed_out_as_copies(hydra_loader: tuple[Any, Any]) -> None:
    files, read, repository = ConfigFiles(), [], hydra_loader[0].repository
    key = (("file",), "config")

    def load() -> Any:
        read.append(1)
        return repository.load_config("config")

    one, two = files.load(key, load), files.load(key, load)
    assert len(read) == 1 and one is not two and one is not None and two is not None
    with read_write(one.config), open_dict(one.config):
        one.config.k = 99
    one.defaults_list.clear()
    assert two.config.k == 1 and two.defaults_list
    assert files.load(key, load).config.k == 1 and len(read) == 1  # type: ignore[union-attr]


def test_nothing_leaks_to_other_compositions(hydra_loader: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """While and after a launch composes, Hydra's loader and other threads' compositions read files as before."""
    loader, master = hydra_loader
    before = dict(vars(loader))
    reads = _reads(loader, monkeypatch)
    beside: list[Any] = []
    real = ConfigFiles.load

    def load_with_a_composition_beside(self: ConfigFiles, key: Any, read: Any) -> Any:
        if not beside:  # another thread composes with the same loader while the launch's composition runs
            thread = threading.Thread(
                target=lambda: beside.append(loader.load_sweep_config(master, ["clarifier=none"])), name="beside"
            )
            thread.start()
            thread.join()
        return real(self, key, read)

    monkeypatch.setattr(ConfigFiles, "load", load_with_a_composition_beside)
    composed = ComposedJobs()
    for job in (["clarifier=gpt"], ["clarifier=none"], ["clarifier=rules_scope"]):
        composed.compose(loader, master, job)
    assert reads[("beside", "config")] == 1 and reads[("MainThread", "config")] == 1
    assert vars(loader) == before and type(loader.repository) is ConfigRepository
    reads.clear()
    _same(loader.load_sweep_config(master, ["clarifier=none"]), beside[0])
    loader.load_sweep_config(master, ["clarifier=none"])
    assert reads[("MainThread", "config")] == 2  # Hydra's own compositions read the files each time again
