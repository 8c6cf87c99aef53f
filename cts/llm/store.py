"""Key-value stores behind a database URL, shared by processes and nodes.

``sqlite:///<path>`` (the default: one file, WAL mode, safe between the processes of
one machine) or ``postgresql://user@host:port/db`` (for a cluster: SQLite over a
network filesystem is not safe). Both hold one table of ``key -> JSON text`` and a
table of *claims*: a process about to compute a missing key claims it first, so a
request in flight on one node is not sent again by another; the others wait (bounded)
for the value. A claim expires after ``ttl_s`` so a crashed owner cannot block anyone.

A SQLite file that is not a database (garbage, truncated) is detected when opened,
moved aside with a warning and replaced by a fresh store: a cache is derived data.
"""

from __future__ import annotations

import fcntl
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cts.llm._dbconn import ThreadConns, redact

__all__ = ["KVStore", "SQLiteStore", "StoreURL", "open_store", "parse_url", "redact", "sqlite_url"]
log = logging.getLogger(__name__)

_BUSY_TIMEOUT_S = 30.0
_TABLE_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_CHECKED: set[Path] = set()  # SQLite files found healthy by this process
_CHECKED_LOCK = threading.Lock()


class KVStore(Protocol):
    """What a cache needs from its store (every method is thread-safe)."""

    url: str

    def get(self, key: str) -> str | None:
        """The stored text for ``key``, or None."""

    def put(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``; concurrent writers of one key leave one row."""

    def claim(self, key: str, owner: str, ttl_s: float) -> bool:
        """Claim (or renew) ``key`` for ``owner`` unless another owner holds an unexpired claim."""

    def release(self, key: str, owner: str) -> None:
        """Drop ``owner``'s claim on ``key`` (a no-op if it expired and was taken)."""

    def put_release(self, key: str, value: str, owner: str) -> None:
        """:meth:`put` and :meth:`release` in one transaction."""

    def renew(self, claims: Sequence[tuple[str, str]], ttl_s: float) -> None:
        """Extend each ``(key, owner)`` claim still held by its owner by ``ttl_s``, in one transaction."""

    def count(self) -> int:
        """Number of stored keys."""

    def close(self) -> None:
        """Close this thread's connection."""


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL."""

    scheme: str
    """``sqlite`` or ``postgresql``."""
    target: str
    """The SQLite file path, or the libpq connection URL."""


def parse_url(url: str) -> StoreURL:
    """Parse ``sqlite:///path`` or ``postgresql[+driver]://...`` (``postgres://`` too).

    Raises:
        ValueError: Another scheme.
    """
    scheme, sep, rest = url.partition("://")
    base = scheme.split("+", 1)[0].lower()
    if sep and base == "sqlite":
        # SQLAlchemy's form: sqlite:///relative/path, sqlite:////absolute/path
        return StoreURL("sqlite", rest.removeprefix("/"))
    if sep and base in ("postgresql", "postgres"):
        return StoreURL("postgresql", f"postgresql://{rest}")
    raise ValueError(f"cache url must be sqlite:///<path> or postgresql://..., got {redact(url)!r}")


def sqlite_url(path: Path) -> str:
    """The URL of a SQLite file."""
    return f"sqlite:///{Path(path).resolve()}"


def open_store(url: str, table: str, *, read_only: bool = False) -> KVStore:
    """The store at ``url`` holding ``table`` (created on first write access).

    Args:
        url: ``sqlite:///...`` or ``postgresql://...``.
        table: Table name of this cache (lower-case identifier).
        read_only: Never create or write anything.
    """
    if not _TABLE_NAME.match(table):
        raise ValueError(f"bad table name {table!r}")
    parsed = parse_url(url)
    if parsed.scheme == "sqlite":
        return SQLiteStore(Path(parsed.target), table, read_only=read_only)
    from cts.llm._pgstore import (
        PostgresStore,  # psycopg only when a cluster store is used
    )

    return PostgresStore(parsed.target, table, read_only=read_only)


class SQLiteStore:
    """A table in a SQLite file (WAL mode, busy timeout) with corrupt-file recovery."""

    def __init__(self, path: Path, table: str, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.table = table
        self.read_only = read_only
        self.url = sqlite_url(self.path)
        self._conns = ThreadConns()

    def get(self, key: str) -> str | None:
        """See :class:`KVStore`."""
        if self.read_only and not self.path.exists():
            return None
        row = self._run(f"SELECT value FROM {self.table} WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, value: str) -> None:
        """See :class:`KVStore`."""
        self._run(self._put_sql, (key, value), commit=True)

    @property
    def _put_sql(self) -> str:
        return (
            f"INSERT INTO {self.table} (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"
        )

    def claim(self, key: str, owner: str, ttl_s: float) -> bool:
        """See :class:`KVStore`."""
        now = time.time()
        sql = (
            f"INSERT INTO {self.table}_claims (key, owner, expires) VALUES (?, ?, ?) "
            f"ON CONFLICT(key) DO UPDATE SET owner = excluded.owner, expires = excluded.expires "
            f"WHERE {self.table}_claims.expires < ? OR {self.table}_claims.owner = excluded.owner RETURNING owner"
        )
        row = self._run(sql, (key, owner, now + ttl_s, now), commit=True, fetch=True)
        return row is not None and row[0] == owner

    def release(self, key: str, owner: str) -> None:
        """See :class:`KVStore`."""
        self._run(f"DELETE FROM {self.table}_claims WHERE key = ? AND owner = ?", (key, owner), commit=True)

    def put_release(self, key: str, value: str, owner: str) -> None:
        """See :class:`KVStore`."""
        conn = self._conn()
        with conn:
            conn.execute(self._put_sql, (key, value))
            conn.execute(f"DELETE FROM {self.table}_claims WHERE key = ? AND owner = ?", (key, owner))

    def renew(self, claims: Sequence[tuple[str, str]], ttl_s: float) -> None:
        """See :class:`KVStore`."""
        expires = time.time() + ttl_s
        conn = self._conn()
        with conn:
            conn.executemany(
                f"UPDATE {self.table}_claims SET expires = ? WHERE key = ? AND owner = ?",
                [(expires, key, owner) for key, owner in claims],
            )

    def count(self) -> int:
        """See :class:`KVStore`."""
        if self.read_only and not self.path.exists():
            return 0
        return int(self._run(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0])

    def close(self) -> None:
        """See :class:`KVStore`."""
        self._conns.close()

    def _run(self, sql: str, args: tuple = (), *, commit: bool = False, fetch: bool = False) -> Any:
        conn = self._conn()
        if not commit:
            return conn.execute(sql, args)
        with conn:  # one short transaction per write
            cursor = conn.execute(sql, args)
            return cursor.fetchone() if fetch else cursor

    def _conn(self) -> sqlite3.Connection:
        conn = self._conns.get()
        if conn is None:
            conn = self._open_checked()
            self._conns.set(conn)
        return conn

    def _open_checked(self) -> sqlite3.Connection:
        if self.read_only:
            return _connect(self.path, read_only=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(self.path):
            try:
                return self._open_writable()
            except sqlite3.DatabaseError as exc:
                _CHECKED.discard(self.path.resolve())
                _move_aside(self.path, exc)
                return self._open_writable()

    def _open_writable(self) -> sqlite3.Connection:
        conn = _connect(self.path, read_only=False)
        try:
            with _CHECKED_LOCK:  # once per file and process, not per thread's connection
                if self.path.resolve() not in _CHECKED:
                    _check_integrity(conn)
                    _CHECKED.add(self.path.resolve())
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self.table}_claims "
                "(key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL)"
            )
            conn.commit()
        except sqlite3.DatabaseError:
            conn.close()
            raise
        return conn


def _connect(path: Path, *, read_only: bool) -> sqlite3.Connection:
    if read_only:
        uri = f"{path.resolve().as_uri()}?mode=ro"
        return sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S, check_same_thread=False)
    conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
    return conn


def _check_integrity(conn: sqlite3.Connection) -> None:
    # quick_check reads every page once: it finds a truncated file, which a bare
    # open does not (SQLite reads pages lazily and fails later, mid-job).
    rows = conn.execute("PRAGMA quick_check").fetchall()
    if rows != [("ok",)]:
        raise sqlite3.DatabaseError("; ".join(str(r[0]) for r in rows[:3]))


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    # Serialises check-and-recover between the processes opening one file, so a
    # healthy store that another process just recreated is never moved aside.
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _move_aside(path: Path, exc: Exception) -> None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        part = Path(f"{path}{suffix}")
        if part.exists():
            part.replace(Path(f"{aside}{suffix}"))
    log.warning("cache %s is corrupt (%s): moved aside to %s; starting a fresh cache", path, exc, aside)
