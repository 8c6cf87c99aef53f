"""A job dir's files: records (the commit marker), traces, infrastructure failures; the streaming sink."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import (
    Iterator,
    Mapping,
)
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cts._util.io import LineFile, unwritable
from cts._util.jsonfast import json_line
from cts.core.records import (
    Record,
    read_records,
)

log = logging.getLogger(__name__)

RECORDS_FILE = "records.jsonl"
TRACES_FILE = "traces.jsonl"
INFRA_FILE = "infra_failures.jsonl"
"""Instances of the last invocation that failed on infrastructure (not committed; a resume retries them)."""
RETRIED_FILE = "records.retried.jsonl"
"""Infrastructure-failed records of older versions, moved out of ``records.jsonl`` to be retried."""


class DirRecords:
    """A job dir's ``records.jsonl``, read afresh on each pass: a job's end holds none of its records at once.

    Tens of thousands of full records (answers, labels, trace summaries) are about 7 KB each
    in memory; each pass over 100 of them costs about 3 ms.
    """

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / RECORDS_FILE

    def __iter__(self) -> Iterator[Record]:
        return read_records(self.path)


def trace_lines(out_dir: Path, keys: set[tuple[str, int]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The trace lines of the instance runs ``keys`` (``(id, repeat)``), as the job wrote them, by key."""
    found: dict[tuple[str, int], list[dict[str, Any]]] = {key: [] for key in keys}
    path = out_dir / TRACES_FILE
    if not keys or not path.exists():
        return found
    with path.open(encoding="utf-8") as f:
        for raw in f:
            if not raw.strip():
                continue
            line = json.loads(raw)
            key = (str(line.get("id")), int(line.get("repeat") or 0))
            if key in found:
                found[key].append(line)
    return found


def read_results(out_dir: Path) -> list[Record]:
    """The committed results of a job dir, moving infrastructure failures aside first.

    Records of older versions whose error is an infrastructure failure are moved
    from ``records.jsonl`` to ``records.retried.jsonl`` (atomically), so that the
    instance runs again and ``records.jsonl`` keeps exactly one line per finished instance.
    """
    path = out_dir / RECORDS_FILE
    _drop_torn_tail(path)
    records = list(read_records(path))
    stale = [r for r in records if r.infra_error is not None]
    if not stale:
        return records
    kept = [r for r in records if r.infra_error is None]
    retried = LineFile(out_dir / RETRIED_FILE)
    try:
        retried.write("".join(r.to_json() + "\n" for r in stale))
    finally:
        retried.close()
    tmp = path.with_suffix(".jsonl.tmp")
    try:
        tmp.write_text("".join(r.to_json() + "\n" for r in kept), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise unwritable(e, path) from e
    log.warning("%d record(s) in %s failed on infrastructure in an earlier run; running them again", len(stale), path)
    return kept


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line left half-written by a killed job, so appending cannot glue onto it."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        data = f.read()
    try:
        os.truncate(path, data.rfind(b"\n") + 1)
    except OSError as e:
        raise unwritable(e, path) from e


class JobSink:
    """Appends each finished instance to the job dir, each file's lines in one write (:class:`cts._util.io.LineFile`).

    Traces go first and the record last: a record is the commit marker of its
    instance, so a job killed in between reruns that instance on resume. An
    instance that failed on infrastructure is never committed: one line in
    ``infra_failures.jsonl`` says why, and a resume runs it again. A write that
    fails (disk full, read-only) leaves no part of the instance in either file and
    raises :class:`cts._util.io.UnwritableOutput`.
    """

    def __init__(self, out_dir: Path) -> None:
        _drop_torn_tail(out_dir / RECORDS_FILE)
        _drop_torn_tail(out_dir / TRACES_FILE)
        self.records = LineFile(out_dir / RECORDS_FILE)
        self.traces = LineFile(out_dir / TRACES_FILE)
        self.failures = LineFile(out_dir / INFRA_FILE, truncate=True)
        self.n_infra = 0

    def __enter__(self) -> JobSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.records.close()
        self.traces.close()
        self.failures.close()

    def write_failure(self, line: Mapping[str, Any]) -> None:
        """Note one infrastructure failure (or the breaker's stop) of this invocation."""
        self.failures.write(json.dumps({**line, "time": time.time()}, ensure_ascii=False) + "\n")

    def write(self, record: Record, traces: list[dict[str, Any]]) -> bool:
        """Persist one instance: its traces, then its record; False (not committed) on an infra failure."""
        infra = record.infra_error
        if infra is not None:
            self.n_infra += 1
            log.warning(
                "instance %s failed on infrastructure (not committed, a resume retries it): %s: %s",
                record.id,
                infra.stage,
                infra.message,
            )
            self.write_failure({"id": record.id, **asdict(infra)})
            return False
        mark = self.traces.size()
        self.traces.write("".join(json_line(t) + "\n" for t in traces))
        try:
            self.records.write(json_line(record.to_plain(), sort_keys=True) + "\n")  # Record.to_json's value
        except OSError:
            self.traces.rewind(mark)  # the instance reruns on resume: its traces would be there twice
            raise
        return True
