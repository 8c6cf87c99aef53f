"""Trace documents written to the store, or kept in their job dirs while a tracking server does not answer."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cts.tracking._assessments import Assessed
from cts.tracking._outbox import append_lines, store_down, unreachable
from cts.tracking._sqlbulk import KnownExperiments
from cts.tracking._tracedoc import built_document
from cts.tracking._tracewrite import write_traces

log = logging.getLogger("cts.tracking.writer")

OUTBOX_KEY = "outbox"
"""A document's key naming the file it is kept in should its store be down (its job dir's traces outbox)."""


def write_or_keep(
    client: Any, uri: str, docs: Sequence[Mapping[str, Any]], experiments: KnownExperiments | None = None
) -> tuple[int, list[str], str | None]:
    """Write ``docs`` to the store; keep them in their job dirs when it is down (found so now or earlier).

    A batch that fails while the server does not answer is kept whole: the traces of it the store
    did take are skipped when the outbox is written (a trace id is never written twice).

    Returns:
        How many documents were written or kept, why not for the others, and why the store is down
        when this call found it so (None otherwise).
    """
    if store_down(uri) is None:
        written, failures = write_traces(client, docs, experiments)
        if not failures or not unreachable(uri, RuntimeError(failures[0])):
            return written, failures, None
        found = store_down(uri)
    else:
        found = None
    return keep_traces(docs), [], found


def keep_traces(docs: Sequence[Mapping[str, Any]]) -> int:
    """Append the documents (spans built) to their outboxes; returns how many were kept."""
    by_file: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for doc in docs:
        built = {k: v for k, v in built_document(doc).items() if k != OUTBOX_KEY}
        by_file[str(doc.get(OUTBOX_KEY) or "")].append(
            {**built, "assessments": [asdict(a) for a in built["assessments"]]}
        )
    lost = by_file.pop("", [])
    if lost:
        log.warning("the store is down: %d traces of runs without a job dir are lost", len(lost))
    for path, rows in by_file.items():
        append_lines(Path(path), rows)
    return len(docs) - len(lost)


def kept_document(line: Mapping[str, Any]) -> dict[str, Any]:
    """A document as :func:`keep_traces` wrote it, ready for :func:`cts.tracking._tracewrite.write_traces` again."""
    error = lambda a: tuple(a["error"]) if a.get("error") else None  # noqa: E731 - JSON made the pair a list
    return {**line, "assessments": [Assessed(**{**a, "error": error(a)}) for a in line["assessments"]]}
