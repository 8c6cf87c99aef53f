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

from cts._util.jsonfast import canonical_json
from cts._util.offload import Offload
from cts.llm.store import KVStore, open_store, parse_url, redact, sqlite_url

log = logging.getLogger(__name__)

CacheMode = Literal["read_write", "read_only", "off"]
CACHE_MODES: tuple[CacheMode, ...] = ("read_write", "read_only", "off")
CLAIM_WAIT_S = 300.0
"""Longest wait for a response another process is computing; then compute it here."""
CLAIM_TTL_S = 15.0
"""A claim lives this long unless its owner renews it (every third of it, while computing),
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
    """

    def __init__(
        self,
        path: Path | str,
        mode: CacheMode = "read_write",
        *,
        table: str = "responses",
        claim_wait_s: float = CLAIM_WAIT_S,
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
        self._store: KVStore | None = None
        self._lock = threading.Lock()
        self.offload = Offload(name="cts-cache")
        """Runs the store's calls off the event loop (a few threads of this cache's)."""

    @staticmethod
    def key(obj: Any) -> str:
        """Return the sha256 hex digest of ``obj`` as canonical JSON (:func:`cts._util.jsonfast.canonical_json`)."""
        return hashlib.sha256(canonical_json(obj)).hexdigest()

    def get(self, key: str) -> dict | None:
        """Return the stored value for ``key`` or None (always None when off)."""
        if self.mode == "off":
            return None
        text = self.store.get(key)
        return None if text is None else json.loads(text)

    def put(self, key: str, value: dict) -> None:
        """Store ``value`` under ``key`` (a no-op unless mode is read_write)."""
        if self.mode != "read_write":
            return
        self.store.put(key, json.dumps(value, ensure_ascii=False, sort_keys=True))

    async def get_or_compute(
        self,
        key: str,
        compute: Callable[[], Awaitable[dict]],
        storable: Callable[[dict], bool] = lambda _: True,
        run: StoreRunner | None = None,
        on_miss: Callable[[], None] = lambda: None,
        looked: bool = False,
    ) -> tuple[dict, bool]:
        """The value of ``key``: cached, or computed once among all processes sharing the store.

        In ``read_write`` mode a miss is claimed before ``compute`` runs; whoever finds
        the key claimed waits (up to ``claim_wait_s``) for the owner's row, then
        computes it itself (the owner may have failed or stored nothing). A miss costs
        three trips off the event loop: the look, the claim with a last look, and the row
        stored with the claim released.

        Args:
            key: The cache key.
            compute: Produces the value on a miss; its exceptions propagate unchanged.
            storable: Whether a computed value may be stored.
            run: Runs each store operation off the event loop (default :attr:`offload`);
                the LLM runtime passes one that reports store failures as infrastructure.
            on_miss: Called on a miss before anything else (the runtime's spend-limit check).
            looked: The caller has just looked the key up and missed (the first look is skipped).

        Returns:
            The value and whether it came from the cache.
        """
        run = run or self.offload
        hit = None if looked else await self._get_async(key, run)
        if hit is not None:
            return hit, True
        on_miss()
        if self.mode != "read_write":
            return await compute(), False
        owner = f"{_PROCESS}-{next(_CLAIMS)}"  # unique across processes, without a urandom read per claim
        hit, claimed = await self._claim_or_wait(key, owner, run)
        if hit is not None or not claimed:
            return (hit, True) if hit is not None else (await self._compute_unclaimed(compute, storable, key, run))
        renewal: list[asyncio.Future[None]] = []  # a timer, not a task per claim: most replies come before it fires
        timer = asyncio.get_running_loop().call_later(
            CLAIM_TTL_S / 3, lambda: renewal.append(asyncio.ensure_future(self._renew(key, owner)))
        )
        value: dict | None = None
        try:
            value = await compute()
            return value, False
        finally:
            timer.cancel()
            for renew in renewal:
                renew.cancel()
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
        """Store the computed row (unless None) and drop the claim, in one trip off the loop."""
        if value is not None:
            await run(self._put_release, key, value, owner)
            return
        await self._release(key, owner)

    def _put_release(self, key: str, value: dict, owner: str) -> None:
        self.put(key, value)
        try:
            self.store.release(key, owner)
        except Exception as exc:  # noqa: BLE001 - the claim then lapses by itself within its lease
            log.warning("could not release the claim on cache key %s: %s", key[:12], exc)

    async def _release(self, key: str, owner: str) -> None:
        try:
            await self.offload(self.store.release, key, owner)
        except Exception as exc:  # noqa: BLE001 - the claim then lapses by itself within its lease
            log.warning("could not release the claim on cache key %s: %s", key[:12], exc)

    async def _renew(self, key: str, owner: str) -> None:
        """Renew the claim now, then every third of its lease (started a third of a lease after the claim)."""
        while True:
            try:
                await self.offload(self.store.claim, key, owner, CLAIM_TTL_S)
            except Exception as exc:  # noqa: BLE001 - a lost lease only risks a duplicate request
                log.warning("could not renew the claim on cache key %s: %s", key[:12], exc)
            await asyncio.sleep(CLAIM_TTL_S / 3)

    async def _claim_or_wait(self, key: str, owner: str, run: StoreRunner) -> tuple[dict | None, bool]:
        """``(row, claimed)``: our claim with a last look at the row, or the row another owner stored.

        ``(None, False)`` when another owner kept the key claimed past ``claim_wait_s``.
        """
        deadline = time.monotonic() + self.claim_wait_s
        pause = _POLL_S[0]
        while True:
            hit, claimed = await run(self._claim_and_look, key, owner)
            if hit is not None or claimed:
                return hit, claimed
            await asyncio.sleep(pause)
            if time.monotonic() > deadline:
                log.warning("cache key %s stayed claimed for %.0f s; computing it here", key[:12], self.claim_wait_s)
                return None, False
            pause = min(pause * 2, _POLL_S[1])

    def _claim_and_look(self, key: str, owner: str) -> tuple[dict | None, bool]:
        """Claim ``key``; then look at its row (stored between the caller's last look and the claim, or by
        the owner whose claim kept ours out). A row found releases our claim at once."""
        claimed = self.store.claim(key, owner, CLAIM_TTL_S)
        hit = self.get(key)
        if hit is not None and claimed:
            self.store.release(key, owner)
        return hit, claimed and hit is None

    async def _get_async(self, key: str, run: StoreRunner) -> dict | None:
        if self.mode == "off":
            return None
        return await run(self.get, key)

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
