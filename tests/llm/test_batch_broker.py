"""The batch broker's schedule on an in-process Batch API: flushes, re-queues, the ledger and resumes.

The wire here is a scripted provider (no HTTP): what it receives, and when, is the broker's
behaviour under test. The emulators over HTTP are in ``tests/batch_emulators.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from cts.core.types import CallError
from cts.llm.batch import BatchSettings
from cts.llm.batch._broker import BatchBroker, batch_counts
from cts.llm.batch._ledger import Ledger, Route
from cts.llm.batch._wire import Outcome, Status

ROUTE = Route("openai", "http://127.0.0.1:1/v1", "openai/m", (), 1e-6, 2e-6)


class ScriptedWire:
    """A provider that ends each batch after ``polls`` status calls; ``outcome(key, sending)`` scripts each line."""

    def __init__(self, polls: int = 1, outcome: Callable[[str, int], Outcome] | None = None) -> None:
        self.polls = polls
        self.outcome = outcome or (lambda key, n: Outcome(response={"reply": key}))
        self.batches: dict[str, list[str]] = {}
        self.by_local: dict[str, str] = {}
        self.seen: dict[str, int] = {}
        self.sent: dict[str, int] = {}

    def body(self, route: Route, messages: list[dict[str, Any]], params: Mapping[str, Any]) -> tuple[dict, Route]:
        return {"messages": messages, **params}, route

    async def submit(
        self, route: Route, key: str | None, local_id: str, lines: list[tuple[str, dict]], window: str = "24h"
    ) -> str:
        batch_id = f"b{len(self.batches)}"
        self.batches[batch_id] = [cid for cid, _ in lines]
        self.by_local[local_id] = batch_id
        for cid, _ in lines:
            self.sent[cid] = self.sent.get(cid, 0) + 1
        return batch_id

    async def status(self, route: Route, key: str | None, batch_id: str) -> Status:
        self.seen[batch_id] = self.seen.get(batch_id, 0) + 1
        ended = self.seen[batch_id] >= self.polls
        return Status(ended, "completed" if ended else "in_progress", {}, {"id": batch_id})

    async def results(self, route: Route, key: str | None, status: Status) -> dict[str, Outcome]:
        ids = self.batches[status.raw["id"]]
        return {cid: self.outcome(cid, self.sent[cid]) for cid in ids}

    async def find(self, route: Route, key: str | None, local_id: str) -> str | None:
        return self.by_local.get(local_id)


def broker(tmp_path: Path, wire: ScriptedWire, stored: list | None = None, **settings: Any) -> BatchBroker:
    values = {"max_requests": 3, "max_wait_s": 0.05, "poll_s": 0.01, **settings}

    async def store(key: str, route: Route, response: Any) -> None:
        (stored if stored is not None else []).append((key, response))

    return BatchBroker(BatchSettings(roles=("judge",), **values), lambda: tmp_path, store, {"openai": wire})


async def ask(b: BatchBroker, *keys: str) -> list[Any]:
    return await asyncio.gather(
        *(b.send(ROUTE, "sk", k, [{"role": "user", "content": k}], {}) for k in keys), return_exceptions=True
    )


def test_requests_are_gathered_into_batches_by_size_then_by_time(tmp_path: Path) -> None:
    wire = ScriptedWire()
    b = broker(tmp_path, wire)
    replies = asyncio.run(ask(b, *"abcdefg"))
    assert replies == [{"reply": k} for k in "abcdefg"]
    assert sorted(len(v) for v in wire.batches.values()) == [1, 3, 3]  # two full ones at once, the rest on the timer
    assert b.sizes == [3, 3, 1] and b.submitted == 3 and b.done == 3
    entries = Ledger(tmp_path).entries()
    assert len(entries) == 3 and all(e.batch_id and e.ended == "completed" for e in entries.values())


def test_the_same_request_twice_is_one_line(tmp_path: Path) -> None:
    wire = ScriptedWire()
    replies = asyncio.run(ask(broker(tmp_path, wire), "a", "a", "b"))
    assert replies[0] == replies[1] == {"reply": "a"} and wire.sent == {"a": 1, "b": 1}


def test_an_expired_line_is_sent_again_in_a_later_batch_and_only_it(tmp_path: Path) -> None:
    def expires_once(key: str, sending: int) -> Outcome:
        if key == "b" and sending == 1:
            return Outcome(retry=True, error=RuntimeError("batch_expired"))
        return Outcome(response={"reply": key})

    wire = ScriptedWire(outcome=expires_once)
    replies = asyncio.run(ask(broker(tmp_path, wire), "a", "b", "c"))
    assert replies == [{"reply": k} for k in "abc"]
    assert wire.sent == {"a": 1, "b": 2, "c": 1}
    assert list(wire.batches.values()) == [["a", "b", "c"], ["b"]]


def test_a_line_that_keeps_failing_ends_as_a_batch_error_after_max_submissions(tmp_path: Path) -> None:
    wire = ScriptedWire(outcome=lambda k, n: Outcome(retry=True, error=RuntimeError("batch_expired")))
    (reply,) = asyncio.run(ask(broker(tmp_path, wire, max_submissions=2), "a"))
    assert isinstance(reply, CallError) and reply.kind == "batch" and reply.infra  # no result: a rerun sends it again
    assert "after 2 batch submission(s)" in reply.message and "batch_expired" in reply.message
    assert wire.sent == {"a": 2}


def test_a_refused_line_is_not_sent_again(tmp_path: Path) -> None:
    refused = ValueError("400 invalid")
    wire = ScriptedWire(outcome=lambda k, n: Outcome(retry=False, error=refused))
    (reply,) = asyncio.run(ask(broker(tmp_path, wire), "a"))
    assert reply is refused and wire.sent == {"a": 1}


def test_a_resumed_process_polls_the_open_batch_and_sends_nothing_again(tmp_path: Path) -> None:
    wire = ScriptedWire(polls=10**9)  # never ends while the first process runs

    async def first() -> None:
        b = broker(tmp_path, wire)
        tasks = [asyncio.ensure_future(ask(b, "a", "b", "c"))]
        while not wire.batches:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        tasks[0].cancel()  # the process dies with its batch in flight
        await b.aclose()

    asyncio.run(first())
    assert len(Ledger(tmp_path).open_batches()) == 1
    wire.polls = 1
    wire.seen.clear()
    stored: list = []
    b2 = broker(tmp_path, wire, stored)
    replies = asyncio.run(ask(b2, "a", "c"))  # "b" is not asked for again in this run
    assert replies == [{"reply": "a"}, {"reply": "c"}]
    assert wire.sent == {"a": 1, "b": 1, "c": 1} and len(wire.batches) == 1  # 0 duplicate submissions
    assert stored == [("b", {"reply": "b"})]  # paid for, kept for the cache
    assert Ledger(tmp_path).open_batches() == []


def test_an_intent_without_its_batch_id_is_found_at_the_provider_or_sent_again(tmp_path: Path) -> None:
    wire = ScriptedWire()
    ledger = Ledger(tmp_path)
    ledger.intend("lost", ROUTE, ("a",))  # killed between the intent and the provider's answer: never sent
    replies = asyncio.run(ask(broker(tmp_path, wire), "a"))
    assert replies == [{"reply": "a"}] and wire.sent == {"a": 1}
    ends = {e.local_id: e.ended for e in Ledger(tmp_path).entries().values()}
    assert ends["lost"] == "never_submitted"

    wire2 = ScriptedWire(polls=2)
    ledger2 = Ledger(tmp_path / "two")
    asyncio.run(wire2.submit(ROUTE, None, "sent", [("x", {})]))  # it did reach the provider
    ledger2.intend("sent", ROUTE, ("x",))
    replies = asyncio.run(ask(broker(tmp_path / "two", wire2), "x"))
    assert replies == [{"reply": "x"}] and wire2.sent == {"x": 1}


def test_progress_counts_the_batches(tmp_path: Path) -> None:
    wire = ScriptedWire(polls=3)

    async def run() -> tuple[Any, Any]:
        b = broker(tmp_path, wire)
        job = asyncio.ensure_future(ask(b, "a", "b", "c"))
        while not b._running:
            await asyncio.sleep(0.005)
        during = batch_counts(asyncio.get_running_loop())
        await job
        return during, batch_counts(asyncio.get_running_loop())

    during, after = asyncio.run(run())
    assert (during.submitted, during.running, during.done) == (1, 1, 0)
    assert (after.submitted, after.running, after.done) == (1, 0, 1)
    assert after.postfix()["batches"] == "0 running/1 done"


@pytest.mark.parametrize("bad", [{"roles": ["ua"], "colour": 1}])
def test_unknown_batch_keys_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match="colour"):
        BatchSettings.from_mapping(bad)


def test_the_progress_bar_shows_the_batches_beside_the_requests_in_flight() -> None:
    from cts.core.contracts import InFlight

    assert InFlight(3, 2.0).postfix() == {"in_flight": "3", "oldest": "2s"}  # no batch: as before
    shown = InFlight(3, 2.0, 5, 2, 3, 61.4).postfix()
    assert shown["batches"] == "5 sent/2 running/3 done" and shown["batch_age"] == "61s"


@pytest.mark.parametrize(("budget_s", "outcome"), [(0.0, "refused"), (300.0, "done")])
def test_a_failed_batch_api_step_is_retried_within_services_llm_batch_transient_budget_s(
    tmp_path: Path, budget_s: float, outcome: str
) -> None:
    b = broker(tmp_path, ScriptedWire(), transient_budget_s=budget_s)
    tries: list[int] = []

    async def step() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("connection reset by peer")
        return "done"

    async def run() -> str:
        try:
            return await b._transient(step)
        except ConnectionError:
            return "refused"

    assert asyncio.run(run()) == outcome
    assert len(tries) == (1 if outcome == "refused" else 2)
