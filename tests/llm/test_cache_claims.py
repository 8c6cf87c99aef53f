"""Claims of the response cache: two store trips per miss, renewals in one transaction, joins in a process."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cts.core.types import SpendLimitReached
from cts.llm import LLMRuntime, ModelSpec, ResponseCache
from cts.llm.store import SQLiteStore, open_store, parse_url
from tests.llm_server import ScriptedServer, llm_settings

SPEC = ModelSpec("ernie", "openai/ernie-4.5-turbo-128k", params={"temperature": 0})
MESSAGES = [{"role": "user", "content": "哪个地区？ Which region?"}]


def claims(path: Path) -> list[tuple[str, str, float]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT key, owner, expires FROM responses_claims ORDER BY key").fetchall()


def counted(cache: ResponseCache) -> list[str]:
    """The names of the store operations ``cache`` sends off the event loop, as they are sent."""
    trips: list[str] = []
    offload = cache.offload

    def run(fn: Any, *args: Any) -> Any:
        trips.append(fn.__name__)
        return offload(fn, *args)

    cache.offload = run  # type: ignore[method-assign]
    return trips


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file's URL, or a database of a PostgreSQL server started on loopback (slow)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'c.sqlite'}"
    return str(request.getfixturevalue("pg").create_db(f"claims_{tmp_path.name.lower()}"))


def claim_rows(url: str) -> dict[str, tuple[str, float]]:
    sql = "SELECT key, owner, expires FROM responses_claims"
    if url.startswith("sqlite"):
        with sqlite3.connect(parse_url(url).target) as conn:
            rows = conn.execute(sql).fetchall()
    else:
        import psycopg

        with psycopg.connect(url) as pg_conn:
            rows = pg_conn.execute(sql).fetchall()
    return {key: (owner, float(expires)) for key, owner, expires in rows}


def test_put_release_is_one_write_and_renew_extends_only_the_owners_claims(store_url: str) -> None:
    store = open_store(store_url, "responses")
    assert store.claim("k", "a", ttl_s=60)
    store.put_release("k", '{"text": "答案"}', "a")
    assert store.get("k") == '{"text": "答案"}' and claim_rows(store_url) == {}

    assert store.claim("k2", "a", ttl_s=1) and store.claim("k3", "b", ttl_s=1)
    before = claim_rows(store_url)
    store.renew([("k2", "a"), ("k3", "a"), ("gone", "a")], ttl_s=600)  # k3 is b's; "gone" was never claimed
    after = claim_rows(store_url)
    assert after["k2"][0] == "a" and after["k2"][1] > before["k2"][1] + 500
    assert after["k3"] == before["k3"] and "gone" not in after  # a renewal never takes or revives a claim
    store.close()


def test_a_miss_costs_two_store_trips_and_a_hit_one(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")
    trips = counted(cache)

    async def compute() -> dict:
        return {"text": "答案"}

    assert asyncio.run(cache.get_or_compute("k", compute)) == ({"text": "答案"}, False)
    assert trips == ["look_or_claim", "_put_release"]
    assert asyncio.run(cache.get_or_compute("k", compute)) == ({"text": "答案"}, True)
    assert trips[2:] == ["look_or_claim"]
    assert claims(tmp_path / "c.sqlite") == []


def test_claims_held_past_a_third_of_their_lease_are_renewed_together(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path, claim_ttl_s=0.3)  # never 0.1 s without renewal
    other = ResponseCache(path)  # another process's cache on the same file
    renewals: list[int] = []
    store_renew = cache.store.renew

    def renew(batch: Any, ttl_s: float) -> None:
        renewals.append(len(batch))
        store_renew(batch, ttl_s)

    cache.store.renew = renew  # type: ignore[method-assign]
    kept_out: list[bool] = []

    async def compute(i: int) -> dict:
        await asyncio.sleep(0.6)  # twice the lease: only renewals keep the claims
        return {"i": i}

    async def main() -> list[tuple[dict, bool]]:
        jobs = [asyncio.ensure_future(cache.get_or_compute(f"k{i}", lambda i=i: compute(i))) for i in range(8)]
        await asyncio.sleep(0.45)
        kept_out.extend(other.store.claim(f"k{i}", "someone-else", 15.0) for i in range(8))
        done = await asyncio.gather(*jobs)
        # nothing left on the loop: a sweep's end, which waits for the loop's tasks, does not wait for a tick
        assert cache.renewals.held() == 0 and asyncio.all_tasks() == {asyncio.current_task()}
        return done

    assert asyncio.run(main()) == [({"i": i}, False) for i in range(8)]
    assert kept_out == [False] * 8  # every claim was still held past its first lease
    # one transaction a tick (every 0.05 s): the claims taken a little apart share them from the second on
    assert renewals and max(renewals) == 8 and len(renewals) <= 0.6 / 0.05 + 2
    assert cache.renewals.renewed == sum(renewals) and claims(path) == []


class _Runtime:
    def __init__(self, server: ScriptedServer, path: Path, **settings: Any) -> None:
        self.rt = LLMRuntime.from_settings(
            llm_settings(server, cache={"mode": "read_write", "path": str(path)}, **settings), path.parent
        )
        self.trips = counted(self.rt.cache)

    async def ask(self) -> Any:
        return await self.rt.client(SPEC, "ua").complete(MESSAGES)


def test_a_runtime_miss_is_two_trips_and_identical_calls_send_once(llm_server: ScriptedServer, tmp_path: Path) -> None:
    llm_server.latency_s = 0.2
    run = _Runtime(llm_server, tmp_path / "c.sqlite")

    async def main() -> list[Any]:
        return await asyncio.gather(*(run.ask() for _ in range(3)))

    done = asyncio.run(main())
    assert llm_server.served == 1 and len({c.text for c in done}) == 1
    assert sorted(c.cached for c in done) == [False, True, True]
    # each caller looked (and the first claimed) in one trip; the sender stored and released in one more
    assert sorted(run.trips) == ["_put_release", "look_or_claim", "look_or_claim", "look_or_claim"]
    assert claims(tmp_path / "c.sqlite") == []


def test_a_spent_cap_on_a_miss_drops_the_claim_just_taken(llm_server: ScriptedServer, tmp_path: Path) -> None:
    run = _Runtime(llm_server, tmp_path / "c.sqlite", spend={"max_usd": 0.0})
    with pytest.raises(SpendLimitReached):
        asyncio.run(run.ask())
    assert llm_server.served == 0 and claims(tmp_path / "c.sqlite") == []
    assert run.trips == ["look_or_claim", "release"]


def test_calls_wait_for_another_process_and_join_each_other(llm_server: ScriptedServer, tmp_path: Path) -> None:
    """Another process holds the key: the first call here waits for it, an identical call joins that wait,
    and when the other process gives up without a row, one of them sends (the one request of the key)."""
    path = tmp_path / "c.sqlite"
    run = _Runtime(llm_server, path)
    other = SQLiteStore(path, "responses")

    sent = asyncio.run(run.ask())
    stored_key = next(iter(_keys(path)))
    # the same call again after another process claimed the key (say, a sweep on another node)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM responses")
    assert other.claim(stored_key, "other-node", ttl_s=30)

    async def again() -> list[Any]:
        calls = [asyncio.ensure_future(run.ask())]
        await asyncio.sleep(0.15)  # the first waits on the other node's claim
        calls.append(asyncio.ensure_future(run.ask()))  # looks, finds the key claimed, joins the wait
        await asyncio.sleep(0.15)
        other.release(stored_key, "other-node")  # the other node failed: no row
        calls.append(asyncio.ensure_future(run.ask()))  # may claim before the waiting call does: then joins it
        return await asyncio.gather(*calls)

    served = llm_server.served
    done = asyncio.run(again())
    assert llm_server.served == served + 1 and [c.text for c in done] == [sent.text] * 3
    assert claims(path) == []


def _keys(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT key FROM responses")]


def test_a_sqlite_cache_runs_its_store_calls_on_one_thread(tmp_path: Path) -> None:
    """SQLite lets one writer in at a time: more threads would only contend for its lock and the GIL."""
    cache = ResponseCache(tmp_path / "c.sqlite")

    async def compute(i: int) -> dict:
        await asyncio.sleep(0.01)
        return {"i": i}

    async def main() -> list[tuple[dict, bool]]:
        return await asyncio.gather(*(cache.get_or_compute(f"k{i}", lambda i=i: compute(i)) for i in range(32)))

    assert asyncio.run(main()) == [({"i": i}, False) for i in range(32)]
    assert cache.offload.workers == 1 and cache.offload.threads <= 1
    assert ResponseCache("postgresql://u@127.0.0.1:1/db").offload.workers == 4  # network round trips overlap
