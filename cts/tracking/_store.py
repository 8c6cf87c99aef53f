"""The MLflow store: opened (created, upgraded) under an inter-process lock; a broken one explained."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# MLflow 3 sends usage telemetry to its servers unless told not to: cts contacts no host the
# user did not configure (and on an offline machine the attempt only costs a DNS lookup per process).
# Set MLFLOW_DISABLE_TELEMETRY=false to allow it.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# Traces are written by MLflow's asynchronous trace logging, off the job's path. Its defaults send
# spans in batches of 5 (one store write each: ~640 writes for the offline job's 200 traces); cts
# sends up to 512 spans, many traces', per write, at least once a second.
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "true")
os.environ.setdefault("MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE", "512")
os.environ.setdefault("MLFLOW_ASYNC_TRACE_LOGGING_MAX_INTERVAL_MILLIS", "1000")
# MLflow retries a call to a tracking server 7 times over about 4 minutes (its rate limits): a server
# that died held every job's call that long, and many calls in a row hung a sweep. cts retries a call
# 2 times over a few seconds, then keeps what the store missed in the job dirs (cts.tracking._outbox).
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER", "0.5")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")  # a server that hangs: found down within a minute

from filelock import FileLock

from cts.core.errors import TrackingStoreError
from cts.tracking._checks import check_store, damaged_message, sqlite_damage


def mlflow_module() -> Any:
    import mlflow  # imported lazily: it costs ~1 s and most helpers here need it only in jobs

    return mlflow


_PREPARED: set[str] = set()  # stores whose schema this process found current (tests/test_launch_state.py)
_STORE_LOCK_TIMEOUT_S = 600.0  # a first migration of a fresh store takes seconds; a wedged one is an error


def store_lock_path(uri: str) -> Path | None:
    """The inter-process lock guarding creation/upgrade of the store at ``uri``.

    Beside the file for ``sqlite:///``; in the temp dir (keyed by the URI) for other
    databases on this machine; None for a tracking server, which migrates its own store.
    """
    if uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///"))
        return db.with_name(db.name + ".lock")
    if "://" not in uri or uri.startswith(("http://", "https://", "file:", "databricks")):
        return None
    key = hashlib.sha256(uri.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"cts-mlflow-{key}.lock"


def prepare_store(uri: str) -> None:
    """Open (creating or checking the schema of) the tracking store, under an inter-process lock.

    MLflow builds a fresh SQL store with a chain of alembic migrations; processes that
    open it at the same moment (single jobs, a multirun, the report, a notebook) race in
    them and can leave it unusable. Every cts entry point that touches the store comes
    through here first, once per process. A store that cannot be opened fails the later
    callers of the same launch at once (``Launch.store_failures``); the next launch tries again.

    Raises:
        TrackingStoreError: The store exists but is broken (e.g. a migration cut short).
    """
    if uri in _PREPARED:
        return
    failed = _failures()
    if uri in failed:
        raise TrackingStoreError(failed[uri])
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        # SQLite takes one writer at a time: MLflow's 10 trace-logging threads would wait on its lock.
        os.environ.setdefault("MLFLOW_ASYNC_TRACE_LOGGING_MAX_WORKERS", "1")
    lock = store_lock_path(uri)
    if lock:  # imported before taking the lock, which then covers only the store's own work (~0.2 s)
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    with FileLock(lock, timeout=_STORE_LOCK_TIMEOUT_S) if lock else contextlib.nullcontext():
        try:
            check_store(uri)  # a dead server in seconds, a damaged file before anything writes into it
            if uri.startswith("sqlite:///"):
                _create_sqlite_store(Path(uri.removeprefix("sqlite:///")))
            mlflow_module().MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
        except Exception as e:  # noqa: BLE001 - any failure here means the store is unusable
            failed[uri] = e.message if isinstance(e, TrackingStoreError) else broken_store_message(uri, e)
            raise TrackingStoreError(failed[uri]) from None
    _PREPARED.add(uri)


def _create_sqlite_store(db: Path) -> None:
    """Build a missing (or empty) SQLite store beside ``db`` and move it into place (under the store's lock).

    MLflow's migrations take seconds; a process killed among them left a half-built store that
    no later run could open. Now it leaves only ``<db>.creating-<pid>``, removed by the next creation.
    The first store an MLflow version builds is kept as a template (:func:`store_template`); each
    later one is a copy of it: the same file, about a second of CPU sooner.
    """
    if db.exists() and db.stat().st_size > 0:
        return
    for stale in db.parent.glob(f"{db.name}.creating-*"):
        stale.unlink(missing_ok=True)
    part = db.with_name(f"{db.name}.creating-{os.getpid()}")
    template = store_template()
    if _usable_template(template):
        shutil.copyfile(template, part)
    else:
        _migrate(part)
        _keep_template(part, template)
    os.replace(part, db)


def store_template() -> Path:
    """Where this MLflow version's empty SQLite store is kept: ``$CTS_CACHE_DIR`` (or ``~/.cache/cts``)."""
    root = Path(os.environ.get("CTS_CACHE_DIR") or Path.home() / ".cache" / "cts")
    return root / "mlflow-stores" / f"mlflow-{version('mlflow')}.db"


def _migrate(db: Path) -> None:
    """What MLflow's SqlAlchemyStore runs on an empty database: its tables, then every migration."""
    from mlflow.store.db import utils

    engine = utils.create_sqlalchemy_engine_with_retry(f"sqlite:///{db}")
    try:
        utils._initialize_tables(engine)
    finally:
        engine.dispose()


def _usable_template(template: Path) -> bool:
    """A template that SQLite reads whole and that names its schema revision (else it is built again)."""
    try:
        if not template.is_file() or sqlite_damage(template) is not None:
            return False
        with contextlib.closing(sqlite3.connect(f"{template.resolve().as_uri()}?mode=ro", uri=True)) as con:
            return len(con.execute("SELECT version_num FROM alembic_version").fetchall()) == 1
    except (OSError, sqlite3.Error):
        return False


def _keep_template(built: Path, template: Path) -> None:
    """Copy a store just built to ``template`` (atomically). A cache that cannot be written is skipped."""
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=template.parent, prefix=template.name + ".")
    except OSError:
        return
    os.close(fd)
    try:
        shutil.copyfile(built, tmp)
        os.replace(tmp, template)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


def store_failed(uri: str) -> bool:
    """Whether this launch already found the store at ``uri`` unusable (:func:`prepare_store` raised)."""
    return uri in _failures()


def _failures() -> dict[str, str]:
    """Why a store cannot be opened, by URI: the running launch's record, or a fresh one outside a launch."""
    from cts._util.launch import current_launch

    launch = current_launch()
    return launch.store_failures if launch is not None else {}


def broken_store_message(uri: str, error: BaseException) -> str:
    """One message saying what is wrong with a store and how to recover."""
    first = (str(error).strip().splitlines() or [""])[0][:300]
    head = f"cts: the MLflow store {uri} cannot be opened ({type(error).__name__}: {first})."
    if not uri.startswith("sqlite:///"):
        return (
            f"{head} Check that the store is reachable; if its schema is old, back it up and run "
            f"`mlflow db upgrade {uri}`."
        )
    db = Path(uri.removeprefix("sqlite:///"))
    if db.is_file() and (problem := sqlite_damage(db)) is not None:
        return damaged_message(uri, db, problem)
    n_runs, leftovers = _sqlite_state(db)
    other = f"or start a new store with tracking.uri=sqlite:///{db.with_name('mlflow-new.db')}"
    if not n_runs:
        return (
            f"{head} It holds no readable runs (an earlier process probably died while creating it): "
            f"delete {db} and rerun, {other}."
        )
    drop = "; ".join(f"DROP TABLE {t}" for t in leftovers)
    fix = f"sqlite3 {db} '{drop}' && " if leftovers else ""
    return (
        f"{head} It holds {n_runs} runs; a schema migration was probably cut short. Back it up "
        f"(cp {db} {db}.bak), then repair it: {fix}mlflow db upgrade {uri}; {other}."
    )


def _sqlite_state(db: Path) -> tuple[int, list[str]]:
    """Number of runs in a SQLite store and alembic's leftover temp tables (0, [] if unreadable)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            n_runs = con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] if "runs" in tables else 0
    except sqlite3.Error:
        return 0, []
    return int(n_runs), [t for t in tables if t.startswith("_alembic_tmp_")]
