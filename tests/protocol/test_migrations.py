"""A job dir whose stored protocol config differs only by renamed keys resumes; any other change refuses."""

from __future__ import annotations

import json
from pathlib import Path

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
