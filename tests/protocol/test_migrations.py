"""A job dir whose stored protocol config differs only by renamed keys resumes; any other change refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cts.protocol import migrations
from cts.protocol.migrations import Migration, migrate, rename_in_nodes, rename_top_level
from cts.tasks.job import check_resume

OLD = {"k": 1, "stats": {"n_resamples": 100}, "clarifier": {"model": {"_target_": "cts.llm.ModelSpec", "model": "x/y"}}}
NEW = {
    "k": 1,
    "bootstrap": {"n_resamples": 100},
    "clarifier": {"model": {"_target_": "cts.llm.ModelSpec", "id": "x/y"}},
}
RENAMES = (
    Migration("stats -> bootstrap", rename_top_level("stats", "bootstrap")),
    Migration("ModelSpec.model -> id", rename_in_nodes("ModelSpec", "model", "id")),
)


def _old_dir(tmp_path: Path) -> Path:
    check_resume(tmp_path, "old0", OLD)
    (tmp_path / "records.jsonl").write_text('{"id": "a"}\n', encoding="utf-8")
    return tmp_path


def test_migrate_renames_keys_and_leaves_the_stored_config_alone() -> None:
    assert migrate(OLD, RENAMES) == NEW
    assert OLD["stats"] == {"n_resamples": 100} and "model" in OLD["clarifier"]["model"]  # type: ignore[index,operator]
    assert migrate(NEW, RENAMES) == NEW  # today's names pass through


def test_a_dir_of_renamed_keys_resumes_and_is_rewritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _old_dir(tmp_path)
    with pytest.raises(SystemExit):  # without the migrations the dir is another configuration
        check_resume(job, "new1", NEW)
    monkeypatch.setattr(migrations, "MIGRATIONS", RENAMES)
    check_resume(job, "new1", NEW)
    stored = json.loads((job / "fingerprint.json").read_text())
    assert stored == {"fingerprint": "new1", "config": NEW, "migrated_from": ["old0"]}
    check_resume(job, "new1", NEW)  # and it resumes again under today's fingerprint, history kept
    assert json.loads((job / "fingerprint.json").read_text())["migrated_from"] == ["old0"]


def test_a_renamed_key_with_a_changed_value_still_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _old_dir(tmp_path)
    monkeypatch.setattr(migrations, "MIGRATIONS", RENAMES)
    changed = {**NEW, "bootstrap": {"n_resamples": 200}}
    with pytest.raises(SystemExit) as stop:
        check_resume(job, "new2", changed)
    assert "  bootstrap.n_resamples: 100 -> 200" in str(stop.value.code).splitlines()  # the diff is in today's names


def _composed(*overrides: str) -> tuple[str, dict[str, Any]]:
    """The fingerprint and protocol config of the real ``conf/`` with ``experiment=offline`` and ``overrides``."""
    from hydra import compose, initialize_config_dir

    from cts.compose.job_config import protocol_config, protocol_fingerprint
    from tests.conftest import REPO

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=offline", *overrides])
    return protocol_fingerprint(cfg), protocol_config(cfg)


def _stored_before(config: dict[str, Any], fingerprint: str, tmp_path: Path) -> Path:
    """A job dir with records whose ``fingerprint.json`` holds ``config`` and the hash it had then."""
    (tmp_path / "fingerprint.json").write_text(json.dumps({"fingerprint": fingerprint, "config": config}))
    (tmp_path / "records.jsonl").write_text('{"id": "a"}\n', encoding="utf-8")
    return tmp_path


def test_a_dir_of_the_stats_node_resumes_as_bootstrap(tmp_path: Path) -> None:
    fingerprint, config = _composed()
    assert "bootstrap" in config and "stats" not in config  # the bootstrap settings are part of the protocol
    old = {("stats" if k == "bootstrap" else k): v for k, v in config.items()}
    job = _stored_before(old, "before-rename", tmp_path)
    check_resume(job, fingerprint, config)
    assert json.loads((job / "fingerprint.json").read_text())["migrated_from"] == ["before-rename"]
    _stored_before(old, "before-rename", tmp_path)
    changed_fingerprint, changed = _composed("bootstrap.n_resamples=500")
    with pytest.raises(SystemExit) as stop:  # a renamed key with another value is another protocol
        check_resume(job, changed_fingerprint, changed)
    assert "  bootstrap.n_resamples: 10000 -> 500" in str(stop.value.code).splitlines()
