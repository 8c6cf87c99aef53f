"""The batch ledger: what was sent as which batch, kept in the sweep dir before each submission.

One JSON line per event, appended and flushed to disk (``os.fsync``) before the step it
records goes on, so a process killed at any point leaves a ledger that says what may be
in flight:

- ``intent``: a batch about to be submitted (its local id, route and request keys);
- ``submitted``: the provider's batch id of an intent;
- ``ended``: the batch ended (its status and counts) and its results were taken.

A resumed sweep reads it: an intent submitted and not ended is polled, and a request whose
key it holds waits for that batch instead of being sent again. An intent without its
``submitted`` line is looked up at the provider by its local id (OpenAI keeps it in the
batch's ``metadata``); where the provider cannot say (Anthropic), it counts as not sent.
Appends of one line are atomic on a local file system, so jobs of a sweep in several
processes may share one ledger.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

LEDGER_NAME = "llm_batches.jsonl"


@dataclass(frozen=True)
class Route:
    """Where a batch goes: the Batch API, its base URL, the model and the extra headers."""

    api: str
    api_base: str | None
    model: str
    headers: tuple[tuple[str, str], ...] = ()
    price_in: float = 0.0
    price_out: float = 0.0

    def plain(self) -> dict[str, Any]:
        """The route as JSON (no key: keys are never written to disk)."""
        return {
            "api": self.api,
            "api_base": self.api_base,
            "model": self.model,
            "headers": [list(h) for h in self.headers],
            "price": [self.price_in, self.price_out],
        }

    @classmethod
    def from_plain(cls, raw: Mapping[str, Any]) -> Route:
        """The route a ledger line wrote."""
        price = raw.get("price") or [0.0, 0.0]
        headers = tuple((str(k), str(v)) for k, v in raw.get("headers") or ())
        return cls(raw["api"], raw.get("api_base"), raw["model"], headers, float(price[0]), float(price[1]))


@dataclass(frozen=True)
class Entry:
    """One batch as the ledger knows it."""

    local_id: str
    route: Route
    keys: tuple[str, ...]
    created: float
    batch_id: str | None = None
    ended: str | None = None
    """The end status (``completed``, ``ended``, ``expired``, ``cancelled``, ``failed``), None while open."""
    counts: Mapping[str, int] = field(default_factory=dict)


class Ledger:
    """The append-only record of a sweep's batches (``<dir>/llm_batches.jsonl``)."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / LEDGER_NAME
        self._lock = threading.Lock()

    def entries(self) -> dict[str, Entry]:
        """Every batch of the ledger by local id, in the order they were intended."""
        found: dict[str, Entry] = {}
        for line in self._lines():
            local = line.get("local_id", "")
            kind = line.get("event")
            if kind == "intent":
                route = Route.from_plain(line["route"])
                found[local] = Entry(local, route, tuple(line["keys"]), float(line.get("t", 0.0)))
            elif local in found and kind == "submitted":
                found[local] = replace(found[local], batch_id=line["batch_id"])
            elif local in found and kind == "ended":
                found[local] = replace(found[local], ended=line["status"], counts=line.get("counts") or {})
        return found

    def open_batches(self) -> list[Entry]:
        """Batches submitted (or perhaps submitted) and not ended."""
        return [e for e in self.entries().values() if e.ended is None]

    def intend(self, local_id: str, route: Route, keys: tuple[str, ...]) -> None:
        """Record a batch about to be submitted (before the request leaves)."""
        self._append({"event": "intent", "local_id": local_id, "route": route.plain(), "keys": list(keys)})

    def submitted(self, local_id: str, batch_id: str) -> None:
        """Record the provider's id of an intended batch."""
        self._append({"event": "submitted", "local_id": local_id, "batch_id": batch_id})

    def end(self, local_id: str, status: str, counts: Mapping[str, int]) -> None:
        """Record that a batch ended and its results were taken."""
        self._append({"event": "ended", "local_id": local_id, "status": status, "counts": dict(counts)})

    def _append(self, line: dict[str, Any]) -> None:
        line["t"] = time.time()
        data = (json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

    def _lines(self) -> Iterator[dict[str, Any]]:
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return
        for raw in text.splitlines():
            try:
                yield json.loads(raw)
            except ValueError:
                continue  # a line cut by a crash mid-write: what it recorded did not happen
