"""The store checked before any work: a tracking server probed once, a SQLite file's pages checked.

Neither check imports MLflow or writes anything. A dead server fails in seconds (MLflow's own
client retries a refused connection for minutes); a damaged SQLite file is refused before a job
writes into it (MLflow reads pages lazily, so a damaged one fails only at the job's end).
"""

from __future__ import annotations

import contextlib
import sqlite3
import urllib.error
import urllib.request
from pathlib import Path

from cts.core.errors import TrackingStoreError

PROBE_TIMEOUT_S = 5.0
"""How long the probe of a tracking server waits for an answer."""

_NOT_SQLITE = "file is not a database"  # what SQLite says of a file whose header is not its own


def check_store(uri: str) -> None:
    """Refuse a store cts cannot use, before any job starts (one ``error:`` line saying what to do).

    A tracking server (``http(s)://``) must answer one request within :data:`PROBE_TIMEOUT_S`;
    an existing SQLite file must pass ``PRAGMA quick_check``. Other stores are left to MLflow.

    Raises:
        TrackingStoreError: The server does not answer, or the SQLite file is damaged.
    """
    if uri.startswith(("http://", "https://")):
        if (why := server_down(uri)) is not None:
            raise TrackingStoreError(
                f"error: tracking: no MLflow tracking server answers at {uri} (tracking.uri): {why}. "
                f"Start it, or set tracking.uri to a server that runs or to a file (tracking.uri=sqlite:///mlflow.db)"
            )
    elif uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///"))
        if db.is_file() and db.stat().st_size > 0 and (problem := sqlite_damage(db)) is not None:
            raise TrackingStoreError(damaged_message(uri, db, problem))


def server_down(uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the tracking server at ``uri`` does not answer (None when it does, whatever its status code).

    One request to its ``/health`` endpoint, no retry: an HTTP error status still means a server answered.
    """
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s):  # noqa: S310 - the user's URI
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            return f"no answer within {timeout_s:.0f} s"
        return f"{type(reason).__name__}: {reason}"[:200]


def sqlite_damage(db: Path) -> str | None:
    """What SQLite's ``PRAGMA quick_check`` finds wrong with ``db`` (None when it passes), read-only."""
    try:
        with contextlib.closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=30)) as con:
            rows = con.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.DatabaseError as e:
        return str(e)
    if rows == [("ok",)]:
        return None
    lines = [line.strip() for r in rows for line in str(r[0]).splitlines()]
    return "; ".join(line for line in lines if line and not line.startswith("***"))[:300]


def damaged_message(uri: str, db: Path, problem: str) -> str:
    """One ``error:`` line for a damaged SQLite store: what is known, and how to go on without writing into it."""
    new = f"tracking.uri=sqlite:///{db.with_name('mlflow-new.db')}"
    what = (
        "is not a SQLite database: its header (first 100 bytes) is overwritten, or the file is something else"
        if _NOT_SQLITE in problem
        else f"is damaged (SQLite's integrity check: {problem})"
    )
    return (
        f"error: tracking: the MLflow store {db} ({uri}, tracking.uri) {what}; cts writes nothing into a store "
        f"it cannot read. Keep the file as it is (the job dirs keep every result), restore it from a backup, "
        f"or start a new store: {new}"
    )
