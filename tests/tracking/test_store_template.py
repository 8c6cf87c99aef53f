"""A new SQLite store is a copy of the empty store its MLflow version built first (cts.tracking._store)."""

from __future__ import annotations

import contextlib
import sqlite3
from importlib.metadata import version
from pathlib import Path

import pytest

from cts import tracking
from cts.tracking import _store


def schema(db: Path) -> tuple[list[tuple[str, str, str]], list[tuple[str]]]:
    """What a store is made of: its tables, indexes and triggers, and its schema revision."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        objects = con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        return objects, con.execute("SELECT version_num FROM alembic_version").fetchall()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CTS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def migrations(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record each store built by MLflow's migrations (and still build it)."""
    built: list[Path] = []
    migrate = _store._migrate

    def counted(db: Path) -> None:
        built.append(db)
        migrate(db)

    monkeypatch.setattr(_store, "_migrate", counted)
    return built


def test_the_first_store_is_migrated_and_kept_then_each_new_one_is_its_copy(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = migrations(monkeypatch)
    first, second = tmp_path / "a" / "mlflow.db", tmp_path / "b" / "mlflow.db"
    tracking.prepare_store(f"sqlite:///{first}")
    template = cache / "mlflow-stores" / f"mlflow-{version('mlflow')}.db"
    assert _store.store_template() == template and template.is_file()
    tracking.prepare_store(f"sqlite:///{second}")
    assert len(built) == 1  # the second was copied
    assert schema(second) == schema(first) == schema(template)
    assert len(schema(first)[0]) > 20 and schema(first)[1][0][0]  # MLflow's tables, at a named revision
    for db in (first, second):  # each store is its own, and takes runs
        with tracking.open_mlflow_run(tracking.Experiment(f"sqlite:///{db}", "e"), f"run-{db.parent.name}", {"k": "1"}):
            tracking.log_metrics({"score_mean": 1.0})
        assert len(tracking.search_runs(f"sqlite:///{db}")) == 1
    assert sorted(p.name for p in template.parent.iterdir()) == [template.name]  # no leftovers


@pytest.mark.parametrize("content", [b"", b"not a database" * 100, "alembic_version empty"])
def test_a_damaged_template_is_built_again(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, content: bytes | str
) -> None:
    template = _store.store_template()
    template.parent.mkdir(parents=True)
    if isinstance(content, bytes):
        template.write_bytes(content)
    else:
        with contextlib.closing(sqlite3.connect(template)) as con:
            con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32))")
            con.commit()
    built = migrations(monkeypatch)
    db = tmp_path / "mlflow.db"
    tracking.prepare_store(f"sqlite:///{db}")
    assert len(built) == 1 and schema(template) == schema(db) and schema(db)[1]


def test_a_cache_that_cannot_be_written_still_gives_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("a file where the cache dir would be")
    monkeypatch.setenv("CTS_CACHE_DIR", str(tmp_path / "file"))
    db = tmp_path / "mlflow.db"
    tracking.prepare_store(f"sqlite:///{db}")
    assert schema(db)[1] and sorted(p.name for p in tmp_path.iterdir()) == ["file", "mlflow.db", "mlflow.db.lock"]
