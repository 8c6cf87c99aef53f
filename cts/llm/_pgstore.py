"""The PostgreSQL store of :mod:`cts.llm.store` (psycopg 3)."""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from typing import Any

from cts.llm._dbconn import ThreadConns, redact


class PostgresStore:
    """A table in a PostgreSQL database; every statement is its own transaction.

    The password belongs in ``PGPASSWORD`` or ``~/.pgpass`` (libpq reads both), not in
    the URL: the URL is part of the job's config, which launchers write to disk.
    """

    def __init__(self, url: str, table: str, *, read_only: bool = False) -> None:
        self.url = redact(url)
        self._dsn = url
        self.table = table
        self.read_only = read_only
        self._conns = ThreadConns()

    def get(self, key: str) -> str | None:
        """See :class:`cts.llm.store.KVStore`."""
        row = self._run(f"SELECT value FROM {self.table} WHERE key = %s", (key,))
        return None if row is None else str(row[0])

    def put(self, key: str, value: str) -> None:
        """See :class:`cts.llm.store.KVStore`."""
        self._run(self._put_sql, (key, value), fetch=False)

    @property
    def _put_sql(self) -> str:
        return (
            f"INSERT INTO {self.table} (key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
        )

    def claim(self, key: str, owner: str, ttl_s: float) -> bool:
        """See :class:`cts.llm.store.KVStore`."""
        now = time.time()
        sql = (
            f"INSERT INTO {self.table}_claims (key, owner, expires) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires = EXCLUDED.expires "
            f"WHERE {self.table}_claims.expires < %s OR {self.table}_claims.owner = EXCLUDED.owner RETURNING owner"
        )
        row = self._run(sql, (key, owner, now + ttl_s, now))
        return row is not None and row[0] == owner

    def release(self, key: str, owner: str) -> None:
        """See :class:`cts.llm.store.KVStore`."""
        self._run(f"DELETE FROM {self.table}_claims WHERE key = %s AND owner = %s", (key, owner), fetch=False)

    def put_release(self, key: str, value: str, owner: str) -> None:
        """See :class:`cts.llm.store.KVStore`."""
        conn = self._conn()
        with conn.transaction():
            conn.execute(self._put_sql, (key, value))
            conn.execute(f"DELETE FROM {self.table}_claims WHERE key = %s AND owner = %s", (key, owner))

    def renew(self, claims: Sequence[tuple[str, str]], ttl_s: float) -> None:
        """See :class:`cts.llm.store.KVStore`."""
        expires = time.time() + ttl_s
        conn = self._conn()
        with conn.transaction(), conn.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {self.table}_claims SET expires = %s WHERE key = %s AND owner = %s",
                [(expires, key, owner) for key, owner in claims],
            )

    def count(self) -> int:
        """See :class:`cts.llm.store.KVStore`."""
        row = self._run(f"SELECT COUNT(*) FROM {self.table}")
        return int(row[0]) if row is not None else 0

    def close(self) -> None:
        """See :class:`cts.llm.store.KVStore`."""
        self._conns.close()

    def _run(self, sql: str, args: tuple = (), *, fetch: bool = True) -> Any:
        import psycopg

        try:
            cursor = self._conn().execute(sql, args)
        except psycopg.errors.UndefinedTable:
            if self.read_only:  # nothing was ever stored here
                return None
            raise
        return cursor.fetchone() if fetch else None

    def _conn(self) -> Any:
        conn = self._conns.get()
        if conn is None or conn.closed:
            conn = self._connect()
            self._conns.set(conn)
        return conn

    def _connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=10)
        if not self.read_only:
            _create_tables(conn, self.table)
        return conn


def _create_tables(conn: Any, table: str) -> None:
    # Concurrent CREATE TABLE IF NOT EXISTS races in PostgreSQL's catalog (a unique
    # violation on pg_type); a transaction-scoped advisory lock serialises it.
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(table.encode()),))
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {table}_claims "
            "(key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires DOUBLE PRECISION NOT NULL)"
        )
