"""Connection helpers shared by the cache stores (:mod:`cts.llm.store`, :mod:`cts.llm._pgstore`).

Kept apart so the PostgreSQL store, imported lazily by :func:`cts.llm.store.open_store`,
does not import the module that imports it.
"""

from __future__ import annotations

import re
import threading
from typing import Any


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and errors)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


class ThreadConns:
    """One connection per thread (sqlite3 and psycopg connections must not be shared)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self) -> Any:
        """This thread's connection, or None."""
        return getattr(self._local, "conn", None)

    def set(self, conn: Any) -> None:
        """Make ``conn`` this thread's connection."""
        self._local.conn = conn

    def close(self) -> None:
        """Close this thread's connection (if any)."""
        conn = self.get()
        if conn is not None:
            conn.close()
            self.set(None)
