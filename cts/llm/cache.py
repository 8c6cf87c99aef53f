"""Content-addressed response cache shared safely by parallel processes and nodes.

litellm's own cache cannot serve here (its key ignores ``api_base``, its disk
cache is gone), so responses are cached at the call site in a store behind a
database URL (:mod:`cts.llm.store`): a SQLite file in WAL mode by default, or
PostgreSQL when the jobs of a sweep run on several nodes. A missing key is
*claimed* before it is computed, so concurrent jobs wanting the same response
send one request and the others wait for its row.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from cts._util.jsonfast import canonical_json, json_line
from cts._util.offload import Offload
from cts.llm._claims import ClaimRenewals
from cts.llm.store import KVStore, open_store, parse_url, redact, sqlite_url

log = logging.getLogger(__name__)

CacheMode = Literal["read_write", "read_only", "off"]
CACHE_MODES: tuple[CacheMode, ...] = ("read_write", "read_only", "off")
CLAIM_WAIT_S = 300.0
"""Longest wait for a response another process is computing; then compute it here."""
CLAIM_TTL_S = 15.0
"""A claim lives this long unless its owner renews it (about every third of it, while computing),
so the claim of a killed job frees its key within seconds."""
StoreRunner = Callable[..., Awaitable[Any]]
"""Runs ``op(*args)`` off the event loop, like ``asyncio.to_thread`` or :class:`~cts._util.offload.Offload`."""
_POLL_S = (0.02, 0.5)  # first and longest pause between looks at a claimed key
_PROCESS = uuid.uuid4().hex
_CLAIMS = itertools.count(1)


class ResponseCache:
    """Persistent key -> JSON-object store.

    Args:
        path: SQLite file (created with its parent directory when writable), or a
            store URL (``sqlite:///...``, ``postgresql://...``).
        mode: ``read_write`` serves and stores; ``read_only`` serves but never
            stores; ``off`` neither serves nor stores (and never opens the store).
        table: Table of this cache in the store (caches may share one database).
        claim_wait_s: Bounded wait for a key another process has claimed.
        claim_ttl_s: A claim's lease, renewed about every third of it while its value is computed.
    """

    def __init__(
        self,
        path: Path | str,
        mode: CacheMode = "read_write",
        *,
        table: str = "responses",
        claim_wait_s: float = CLAIM_WAIT_S,
        claim_ttl_s: float = CLAIM_TTL_S,
    ) -> None:
        if mode not in CACHE_MODES:
            raise ValueError(f"cache mode must be one of {CACHE_MODES}, got {mode!r}")
        url = str(path) if "://" in str(path) else sqlite_url(Path(path))
        parsed = parse_url(url)
        self.path: Path | None = Path(parsed.target) if parsed.scheme == "sqlite" else None
        self.url = url
        self.mode: CacheMode = mode
        self.table = table
        self.claim_wait_s = claim_wait_s
        self.claim_ttl_s = claim_ttl_s
        self._store: KVStore | None = None
        self._lock = threading.Lock()
        # SQLite lets one writer in at a time: more threads only contend for its lock and the GIL
        # (the distinct-questions paper grid: 33.4 s of sweep CPU with one, 35.3 s with two, 36-37 s with four).
        # A PostgreSQL server answers over the network, so a few calls wait on it at once.
        self.offload = Offload(workers=1 if parsed.scheme == "sqlite" else 4, name="cts-cache")
        """Runs the store's calls off the event loop (one thread of this cache's for SQLite, a few for PostgreSQL)."""
        self.renewals = ClaimRenewals(
            lambda claims: self.offload(self.store.renew, claims, claim_ttl_s), claim_ttl_s / 3
        )
        """Renews the claims this cache holds while their values are computed."""

    @staticmethod
    def key(obj: Any) -> str:
        """Return the sha256 hex digest of ``obj`` as canonical JSON (:func:`cts._util.jsonfast.canonical_json`)."""
        return hashlib.sha256(canonical_json(obj)).hexdigest()

    def get(self, key: str) -> dict | None:
        """Return the stored value for ``key`` or None (always None when off)."""
        if self.mode == "off":
            return None
        text = self.store.get(key)
        return None if text is None else json.loads(text)  # not orjson's: it reads an integer beyond 64 bits as a float

    def put(self, key: str, value: dict) -> None:
        """Store ``value`` under ``key`` (a no-op unless mode is read_write)."""
        if self.mode != "read_write":
            return
        self.store.put(key, _row_text(value))

    def look_or_claim(self, key: str, owner: str) -> tuple[dict | None, bool]:
        """``(value, False)`` for a stored key; else ``(None, claimed)``, with a last look after the claim
        (a row stored in between is returned, and the claim dropped). Claims only in ``read_write`` mode."""
        hit = self.get(key)
        if hit is not None or self.mode != "read_write":
            return hit, False
        return self._claim_and_look(key, owner)

    async def look(self, key: str, run: StoreRunner | None = None) -> tuple[dict | None, str]:
        """:meth:`look_or_claim` in one trip off the event loop (``run``, default :attr:`offload`): the value,
        or None and the owner of the claim taken (``""`` if another owner holds the key, or none is taken)."""
        if self.mode == "off":
            return None, ""
        owner = self.new_owner()
        hit, claimed = await (run or self.offload)(self.look_or_claim, key, owner)
        return hit, (owner if claimed else "")

    @staticmethod
    def new_owner() -> str:
        """A claim owner unique across processes (without a urandom read per claim)."""
        return f"{_PROCESS}-{next(_CLAIMS)}"

    async def get_or_compute(
        self,
        key: str,
        compute: Callable[[], Awaitable[dict]],
        storable: Callable[[dict], bool] = lambda _: True,
        run: StoreRunner | None = None,
        on_miss: Callable[[], None] = lambda: None,
        claim: str | None = None,
    ) -> tuple[dict, bool]:
        """The value of ``key``: cached, or computed once among all processes sharing the store.

        In ``read_write`` mode a miss is claimed before ``compute`` runs; whoever finds
        the key claimed waits (up to ``claim_wait_s``) for the owner's row, then
        computes it itself (the owner may have failed or stored nothing). A miss costs
        two trips off the event loop: the look with the claim (:meth:`look_or_claim`), and
        the row stored with the claim released. Claims held long (a request queued behind
        the endpoint's limiter) are renewed together (:class:`~cts.llm._claims.ClaimRenewals`).

        Args:
            key: The cache key.
            compute: Produces the value on a miss; its exceptions propagate unchanged.
            storable: Whether a computed value may be stored.
            run: Runs each store operation off the event loop (default :attr:`offload`);
                the LLM runtime passes one that reports store failures as infrastructure.
            on_miss: Called on a miss before anything is computed (the runtime's spend-limit check).
            claim: The caller has just called :meth:`look_or_claim` and missed: the owner it
                claimed ``key`` for, or ``""`` if another owner held it (the first trip is skipped).

        Returns:
            The value and whether it came from the cache.
        """
        run = run or self.offload
        if claim is None:
            hit, claim = await self.look(key, run)
            if hit is not None:
                return hit, True
        try:
            on_miss()
        except BaseException:
            if claim:
                await self.release_claim(key, claim)
            raise
        if self.mode != "read_write":
            return await compute(), False
        if not claim:
            owner = self.new_owner()
            hit, claimed = await self._claim_or_wait(key, owner, run)
            if hit is not None:
                return hit, True
            if not claimed:
                return await self._compute_unclaimed(compute, storable, key, run)
            claim = owner
        return await self._compute_claimed(key, claim, compute, storable, run)

    async def _compute_claimed(
        self,
        key: str,
        owner: str,
        compute: Callable[[], Awaitable[dict]],
        storable: Callable[[dict], bool],
        run: StoreRunner,
    ) -> tuple[dict, bool]:
        """Compute the value of a key ``owner`` claimed; store it and release the claim in one trip."""
        self.renewals.hold(key, owner)
        value: dict | None = None
        try:
            value = await compute()
            return value, False
        finally:
            self.renewals.drop(key, owner)
            kept = value if value is not None and storable(value) else None
            await self._store_and_release(key, kept, owner, run)

    async def _compute_unclaimed(
        self, compute: Callable[[], Awaitable[dict]], storable: Callable[[dict], bool], key: str, run: StoreRunner
    ) -> tuple[dict, bool]:
        """Another owner held the key past the wait: compute it here, and store it."""
        value = await compute()
        if storable(value):
            await run(self.put, key, value)
        return value, False

    async def _store_and_release(self, key: str, value: dict | None, owner: str, run: StoreRunner) -> None:
        """Store the computed row (unless None) and drop the claim, in one trip off the loop and one transaction."""
        if value is not None:
            await run(self._put_release, key, value, owner)
            return
        await self.release_claim(key, owner)

    def _put_release(self, key: str, value: dict, owner: str) -> None:
        self.store.put_release(key, _row_text(value), owner)

    async def release_claim(self, key: str, owner: str) -> None:
        """Drop ``owner``'s claim on ``key`` (off the event loop); a failure is logged: the claim then lapses."""
        try:
            await self.offload(self.store.release, key, owner)
        except Exception as exc:  # noqa: BLE001 - the claim then lapses by itself within its lease
            log.warning("could not release the claim on cache key %s: %s", key[:12], exc)

    async def _claim_or_wait(self, key: str, owner: str, run: StoreRunner) -> tuple[dict | None, bool]:
        """``(row, claimed)`` after the caller found ``key`` claimed by another owner: our claim with a
        last look at the row, or the row the other owner stored, tried after a pause and then with longer ones.

        ``(None, False)`` when another owner kept the key claimed past ``claim_wait_s``.
        """
        deadline = time.monotonic() + self.claim_wait_s
        pause = _POLL_S[0]
        while True:
            await asyncio.sleep(pause)
            hit, claimed = await run(self._claim_and_look, key, owner)
            if hit is not None or claimed:
                return hit, claimed
            if time.monotonic() > deadline:
                log.warning("cache key %s stayed claimed for %.0f s; computing it here", key[:12], self.claim_wait_s)
                return None, False
            pause = min(pause * 2, _POLL_S[1])

    def _claim_and_look(self, key: str, owner: str) -> tuple[dict | None, bool]:
        """Claim ``key``; then look at its row (stored between the caller's last look and the claim, or by
        the owner whose claim kept ours out). A row found releases our claim at once."""
        claimed = self.store.claim(key, owner, self.claim_ttl_s)
        hit = self.get(key)
        if hit is not None and claimed:
            self.store.release(key, owner)
        return hit, claimed and hit is None

    @property
    def location(self) -> str:
        """Where the cache lives, for messages: the file, or the URL without its password."""
        return str(self.path) if self.path is not None else redact(self.url)

    @property
    def store(self) -> KVStore:
        """The underlying store (opened on first use)."""
        with self._lock:
            if self._store is None:
                self._store = open_store(self.url, self.table, read_only=self.mode == "read_only")
            return self._store

    def __len__(self) -> int:
        if self.mode == "off":
            return 0
        return self.store.count()

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        if self._store is not None:
            self._store.close()


def _row_text(value: dict) -> str:
    """A value as its row holds it (read back with ``json.loads``)."""
    return json_line(value, sort_keys=True)
