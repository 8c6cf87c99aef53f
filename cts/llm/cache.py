"""Content-addressed response cache shared safely by parallel processes.

litellm's own cache cannot serve here (its key ignores ``api_base``, its disk
cache is gone), so responses are cached at the call site in SQLite (WAL mode):
readers never block writers, every write is one short transaction, and a busy
timeout absorbs lock contention between the jobs of a multirun.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any, Literal

CacheMode = Literal["read_write", "read_only", "off"]
CACHE_MODES: tuple[CacheMode, ...] = ("read_write", "read_only", "off")
_BUSY_TIMEOUT_S = 30.0


class ResponseCache:
    """Persistent key -> JSON-object store.

    Args:
        path: SQLite file (created with its parent directory when writable).
        mode: ``read_write`` serves and stores; ``read_only`` serves but never
            stores; ``off`` neither serves nor stores (and never opens the file).
    """

    def __init__(self, path: Path, mode: CacheMode = "read_write") -> None:
        if mode not in CACHE_MODES:
            raise ValueError(f"cache mode must be one of {CACHE_MODES}, got {mode!r}")
        self.path = Path(path)
        self.mode: CacheMode = mode
        self._local = threading.local()

    @staticmethod
    def key(obj: Any) -> str:
        """Return the sha256 hex digest of ``obj`` as canonical JSON."""
        text = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get(self, key: str) -> dict | None:
        """Return the stored value for ``key`` or None (always None when off)."""
        if self.mode == "off" or (self.mode == "read_only" and not self.path.exists()):
            return None
        row = self._conn().execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value: dict) -> None:
        """Store ``value`` under ``key`` (a no-op unless mode is read_write)."""
        if self.mode != "read_write":
            return
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        with self._conn() as conn:  # one short transaction per write
            conn.execute("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", (key, text))

    def __len__(self) -> int:
        if self.mode == "off" or not self.path.exists():
            return 0
        return int(self._conn().execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _conn(self) -> sqlite3.Connection:
        # sqlite3 connections must not cross threads: keep one per thread.
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
        return conn

    def _open(self) -> sqlite3.Connection:
        if self.mode == "read_only":
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            return sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S)
        conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.commit()
        return conn
