"""CSV instances (``dataset=csv``, and the released benchmark's query file), validated like JSONL.

The header row names the columns; ``fields`` maps the paper's names (``id``, ``blurred_query``,
``fused_query``) onto them, as for JSONL (:mod:`cts.data.jsonl`); every other column goes to
``meta``. Accepted: a UTF-8 BOM, CRLF or LF line ends, quoted values holding commas, quotes and
newlines, any Unicode text (Chinese included). A file without the id column gets ids derived
from the row's queries (:func:`derived_id`): the same pair has the same id in any row order, and
the loader says so. Problems are ``file:line: column: problem`` (the line a row starts on).
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cts.core.types import Instance
from cts.data.jsonl import MAX_FIELD_CHARS, DatasetError, _check_value, _field_map
from cts.text.tokens import normalize

log = logging.getLogger(__name__)

DERIVED_ID = "sha256(blurred_query + U+001F + fused_query), first 12 hex digits"
"""How an id is derived when the file has no id column (said by the loader and by ``inspect``)."""


@dataclass(frozen=True)
class CsvScan:
    """Every good row of a CSV file, every problem, and how ids were found."""

    path: Path
    instances: tuple[Instance, ...]
    problems: tuple[str, ...]
    header: tuple[str, ...]
    derived_ids: bool
    """True when the file has no id column: ids are :func:`derived_id` of each row."""
    n_rows: int = 0


def derived_id(blurred_query: str, fused_query: str) -> str:
    """A stable id for a row without one: ``DERIVED_ID`` (independent of the row's position)."""
    return hashlib.sha256(f"{blurred_query}\x1f{fused_query}".encode()).hexdigest()[:12]


def _decoded(path: Path) -> tuple[str, list[str]]:
    """The file's text (BOM dropped) and one problem per line that is not UTF-8 (kept as escapes)."""
    data = path.read_bytes()
    problems = []
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            problems.append(f"{path}:{lineno}: <row>: invalid UTF-8 ({e.reason} at byte {e.start} of the line)")
    return data.decode("utf-8-sig", errors="surrogateescape"), problems


def _rows(text: str) -> Iterator[tuple[int, list[str]]]:
    """``(first line, cells)`` of every row; a row's line is where it starts (quoted newlines count)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    start = 1
    for cells in reader:
        yield start, cells
        start = reader.line_num + 1


def _undecodable(cells: Sequence[str]) -> bool:
    return any(any("\udc80" <= ch <= "\udcff" for ch in c) for c in cells)


def _parse(
    cells: list[str], header: Sequence[str], fmap: Mapping[str, str], derive: bool, max_chars: int
) -> tuple[Instance | None, list[str]]:
    if len(cells) > len(header):
        return None, [f"<row>: {len(cells)} cells, the header has {len(header)} (an unquoted comma?)"]
    row: dict[str, Any] = dict(zip(header, cells))
    problems, values = [], {}
    for paper, name in fmap.items():
        if paper == "id" and derive:
            continue
        value, problem = _check_value(paper, row.get(name), max_chars)
        if value is None:
            problems.append(f"{name}: {problem}")
        else:
            values[paper] = value
    if problems:
        return None, problems
    if derive:
        values["id"] = derived_id(values["blurred_query"], values["fused_query"])
    meta = {k: v for k, v in row.items() if k not in fmap.values() and k}
    return Instance(meta=meta, **values), []


def _missing_columns(path: Path, header: Sequence[str], fmap: Mapping[str, str], derive: bool) -> list[str]:
    return [
        f"{path}:1: {name}: no such column; the header has {list(header)}: set dataset.fields.{paper}=<column>"
        for paper, name in fmap.items()
        if name not in header and not (paper == "id" and derive)
    ]


def scan_instances_csv(
    path: str | Path, fields: Mapping[str, str] | None = None, max_field_chars: int = MAX_FIELD_CHARS
) -> CsvScan:
    """Read every row of a CSV instance file, keeping the good rows beside the problems.

    Raises:
        FileNotFoundError: The file does not exist.
        DatasetError: A mapping key the paper does not have.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"dataset file not found: {p}")
    fmap = _field_map(fields)
    text, problems = _decoded(p)
    rows = _rows(text)
    lineno, header_cells = next(rows, (1, []))
    header = tuple(h.strip() for h in header_cells)
    derive = fmap["id"] not in header
    missing = _missing_columns(p, header, fmap, derive)
    if missing:  # no row can be read: the one line says which key to set
        n_rows = sum(1 for _, cells in rows if any(c.strip() for c in cells))
        return CsvScan(p, (), tuple(problems + missing), header, derive, n_rows)
    instances: list[Instance] = []
    first: dict[str, int] = {}
    n = 0
    for lineno, cells in rows:
        if not any(c.strip() for c in cells):
            continue
        n += 1
        inst, found = (None, []) if _undecodable(cells) else _parse(cells, header, fmap, derive, max_field_chars)
        if inst is not None and inst.id in first:
            found = [f"{fmap['id']}: duplicate id {inst.id!r} (first at line {first[inst.id]})"]
        problems += [f"{p}:{lineno}: {m}" for m in found]
        if inst is None or found:
            continue
        first[inst.id] = lineno
        instances.append(inst)
        if normalize(inst.blurred_query) == normalize(inst.fused_query):
            log.warning("%s:%d: blurred_query equals fused_query (nothing to clarify)", p, lineno)
    return CsvScan(p, tuple(instances), tuple(problems), header, derive, n)


def read_instances_csv(
    path: str | Path, fields: Mapping[str, str] | None = None, max_field_chars: int = MAX_FIELD_CHARS
) -> list[Instance]:
    """Read and validate a CSV instance file (the module docstring says what is accepted).

    Raises:
        DatasetError: Listing every bad row as ``file:line: column: problem`` (or a file without rows).
        FileNotFoundError: If ``path`` does not exist.
    """
    scan = scan_instances_csv(path, fields, max_field_chars)
    if scan.problems:
        raise DatasetError(list(scan.problems))
    if not scan.instances:
        raise DatasetError([f"{scan.path}: no instances (the file has no rows)"])
    if scan.derived_ids:
        log.info("%s: no %r column: ids are %s", scan.path, _field_map(fields)["id"], DERIVED_ID)
    return list(scan.instances)
