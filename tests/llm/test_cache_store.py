"""Cache stores behind a URL: claims, one computation per key, corrupt SQLite files recovered."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from pathlib import Path

import pytest

from cts.llm import store
from cts.llm.cache import ResponseCache
from cts.llm.store import SQLiteStore, open_store, parse_url, redact
from tests.llm_fakes import protocol_reply
from tests.runs import run_py


def test_urls_parse_and_passwords_are_redacted():
    assert parse_url("sqlite:////abs/c.sqlite").target == "/abs/c.sqlite"
    assert parse_url("sqlite:///rel/c.sqlite").target == "rel/c.sqlite"
    assert parse_url("postgresql+psycopg://u@h:5/db").target == "postgresql://u@h:5/db"
    assert redact("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"
    with pytest.raises(ValueError, match="sqlite:///"):
        parse_url("mysql://h/db")
    with pytest.raises(ValueError):
        open_store("sqlite:///x.sqlite", "bad-name; DROP")


def test_a_claim_excludes_others_until_released_or_expired(tmp_path):
    store = SQLiteStore(tmp_path / "c.sqlite", "responses")
    assert store.claim("k", "a", ttl_s=60) and store.claim("k", "a", ttl_s=60)  # the owner renews
    assert not store.claim("k", "b", ttl_s=60)
    store.release("k", "b")  # not b's claim: nothing happens
    assert not store.claim("k", "b", ttl_s=60)
    store.release("k", "a")
    assert store.claim("k", "b", ttl_s=-1)  # expired at once
    assert store.claim("k", "c", ttl_s=60)


def test_concurrent_misses_of_one_key_compute_it_once(tmp_path):
    cache, calls = ResponseCache(tmp_path / "c.sqlite"), []

    async def compute() -> dict:
        calls.append(1)
        await asyncio.sleep(0.1)
        return {"text": "答案"}

    async def main() -> list:
        return await asyncio.gather(*(cache.get_or_compute("k", compute) for _ in range(5)))

    results = asyncio.run(main())
    assert len(calls) == 1 and [v for v, _ in results] == [{"text": "答案"}] * 5
    assert sorted(hit for _, hit in results) == [False, True, True, True, True]


def _filled(path: Path, n: int = 3000) -> None:
    cache = ResponseCache(path)
    for i in range(n):
        cache.put(f"k{i}", {"text": "长答案 " * 20, "i": i})
    cache.close()
    with sqlite3.connect(path) as conn:  # fold the WAL into the file, as a finished job leaves it
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_cache_file_is_moved_aside_and_replaced(tmp_path, caplog, damage):
    path = tmp_path / "llm_cache.sqlite"
    if damage == "garbage":
        path.write_bytes(b"this is not a database\x00" * 500)
    else:
        _filled(path)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        store._CHECKED.clear()  # as a new process (a later job) finds the file
    with caplog.at_level(logging.WARNING, logger="cts.llm.store"):
        cache = ResponseCache(path)
        assert cache.get("k1") is None
        cache.put("k1", {"text": "fresh"})
    assert ResponseCache(path).get("k1") == {"text": "fresh"}
    aside = [p for p in tmp_path.glob("llm_cache.sqlite.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1 and "corrupt" in caplog.text and str(aside[0]) in caplog.text


def test_a_healthy_cache_is_kept(tmp_path, caplog):
    path = tmp_path / "llm_cache.sqlite"
    _filled(path, 50)
    with caplog.at_level(logging.WARNING):
        assert ResponseCache(path).get("k7")["i"] == 7
    assert not list(tmp_path.glob("*.corrupt-*")) and "corrupt" not in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated"])  # garbage: see the store test above
def test_a_job_with_a_corrupt_cache_recovers_and_scores_every_instance(tmp_path, llm_server, cache_dir, damage):
    llm_server.handler = protocol_reply
    cache = tmp_path / "llm_cache.sqlite"
    if damage == "garbage":
        cache.write_bytes(b"\x13garbage" * 4096)
    else:
        _filled(cache)
        cache.write_bytes(cache.read_bytes()[:50_000])
    proc = run_py(
        "limit=4",
        f"services.llm.api_base={llm_server.base_url}",
        f"services.llm.cache.path={cache}",
        f"hydra.run.dir={tmp_path / 'job'}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={cache_dir}",
        cwd=tmp_path,
    )
    records = [json.loads(x) for x in (tmp_path / "job" / "records.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(
        r["error"] is None and r["clarified"]["score"] is not None and r["orig"]["score"] is not None for r in records
    ), records
    assert "corrupt" in proc.stdout + proc.stderr and list(tmp_path.glob("llm_cache.sqlite.corrupt-*"))
