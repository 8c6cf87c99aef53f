"""``python -m cts.release inspect``: each file of a release dir, its layout and the mapping cts would use.

Per file: its columns or keys (and a nugget's and an evidence snippet's), counts, the first record
with long values cut, and which of its keys each mapping key reads. Every problem is an ``error:``
line at the end, so a mismatch is fixed by setting the key it names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cts.core.types import Instance
from cts.data.csvfile import DERIVED_ID, CsvScan, scan_instances_csv
from cts.data.release import RELEASE_GOLD, RELEASE_QUERIES, gold_by_instance
from cts.gold.mapping import GoldLayoutError, GoldScan, scan_mapped_gold
from cts.release.importer import KIND_DIRS
from cts.release.outputs import NAME_PATTERN, OutputLayoutError, OutputScan, scan_outputs, system_and_k, unknown_ids

CUT = 60
"""Longest string shown in an example (longer ones end with an ellipsis)."""


def cut(value: Any, n: int = CUT) -> Any:
    """``value`` with strings cut to ``n`` characters and lists to their first item (plus a count)."""
    if isinstance(value, str):
        return value if len(value) <= n else value[:n] + f"…(+{len(value) - n})"
    if isinstance(value, list):
        shown = [cut(v, n) for v in value[:1]]
        return shown + ([f"…(+{len(value) - 1} more)"] if len(value) > 1 else [])
    if isinstance(value, dict):
        return {k: cut(v, n) for k, v in value.items()}
    return value


def _example(path: Path) -> str:
    with path.open("rb") as f:
        for raw in f:
            try:
                line = raw.decode("utf-8-sig").strip()
                if line:
                    return json.dumps(cut(json.loads(line)), ensure_ascii=False)
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
    return "(none)"


def _mapping(names: Mapping[str, str | None]) -> str:
    used = [f"{k}={v}" for k, v in names.items() if v]
    none = [k for k, v in names.items() if not v]
    return ", ".join(used) + (f"; not in the file: {', '.join(none)}" if none else "")


def csv_section(scan: CsvScan, fields: Mapping[str, str] | None) -> list[str]:
    """The query file: header, rows, how ids are found, an example."""
    first = scan.instances[0] if scan.instances else None
    example = {"id": first.id, "blurred_query": first.blurred_query, "fused_query": first.fused_query} if first else {}
    ids = (
        f"none in the file: derived, {DERIVED_ID}" if scan.derived_ids else f"column {(fields or {}).get('id', 'id')!r}"
    )
    return [
        f"{scan.path}: CSV, {scan.n_rows} rows ({len(scan.instances)} good), columns {list(scan.header)}",
        f"  ids: {ids}",
        f"  example: {json.dumps(cut(example), ensure_ascii=False)}",
    ]


def gold_section(scan: GoldScan) -> list[str]:
    """The gold file: records, nuggets, the keys each mapping key reads, an example."""
    nuggets = sum(len(g.nuggets) for g in scan.golds)
    weights = sorted({n.weight for g in scan.golds for n in g.nuggets})
    matched = "ids" if scan.names.get("id") else f"the intent query ({scan.names.get('query')})"
    return [
        f"{scan.path}: JSONL, {scan.n_records} records ({len(scan.golds)} good), {nuggets} nuggets, weights {weights}",
        f"  matched to instances by {matched}",
        f"  mapping (dataset.gold_fields): {_mapping(scan.names)}",
        f"  example: {_example(scan.path)}",
        *(
            ["  the nuggets cite no evidence ids: read without them (nothing to check)"]
            if not scan.names["evidence_ids"]
            else []
        ),
    ]


def output_section(scan: OutputScan, system: str, k: int) -> list[str]:
    """One candidate or clarify-only file: its system and k, records, the keys used, an example."""
    return [
        f"{scan.path}: system {system}, k={k}, {scan.n_records} records ({len(scan.rows)} good)",
        f"  mapping (--field): {_mapping(scan.names)}",
        f"  example: {_example(scan.path)}",
    ]


def _gold(
    release: Path, scan: CsvScan | None, gold_fields: Mapping[str, str] | None
) -> tuple[list[str], list[str], set[str]]:
    path = release / RELEASE_GOLD
    try:
        gscan = scan_mapped_gold(path, gold_fields)
    except (GoldLayoutError, FileNotFoundError) as e:
        return [f"{path}: cannot be read as gold"], [str(e).splitlines()[0]], set()
    lines, problems = gold_section(gscan), list(gscan.problems)
    instances = scan.instances if scan else ()
    matched = gold_by_instance(gscan, instances)
    if instances:
        lines.append(f"  gold for {len(matched)} of {len(instances)} instances")
    return lines, problems, _gold_ids(gscan, instances)


def _gold_ids(scan: GoldScan, instances: Sequence[Instance]) -> set[str]:
    """The instance ids the gold file has a record for, good or bad (a bad record is its own error, not the outputs')."""
    if scan.names.get("id"):
        return set(scan.keys)
    return {i.id for i in instances if i.fused_query in scan.keys}


def _outputs(
    release: Path, pattern: str, fields: Mapping[str, str] | None, gold_ids: set[str]
) -> tuple[list[str], list[str]]:
    lines: list[str] = []
    problems: list[str] = []
    for kind, sub in KIND_DIRS.items():
        for path in sorted((release / sub).glob("*.jsonl")):
            try:
                system, k = system_and_k(path, pattern)
                scan = scan_outputs(path, kind, fields)
            except OutputLayoutError as e:
                problems.append(str(e))
                continue
            lines += output_section(scan, system, k)
            problems += [*scan.problems, *(unknown_ids(scan, gold_ids, "the gold") if gold_ids else [])]
    return lines, problems


def inspect_release(
    release: str | Path,
    fields: Mapping[str, str] | None = None,
    gold_fields: Mapping[str, str] | None = None,
    output_fields: Mapping[str, str] | None = None,
    pattern: str = NAME_PATTERN,
) -> tuple[list[str], list[str]]:
    """The report's lines and the problems (each one line) of a release dir.

    Raises:
        FileNotFoundError: ``release`` is not a dir.
    """
    root = Path(release)
    if not root.is_dir():
        raise FileNotFoundError(f"{release}: no such dir; unzip the release and name its release/ dir")
    lines, problems = [f"release: {root}"], []
    queries = root / RELEASE_QUERIES
    scan = scan_instances_csv(queries, fields) if queries.is_file() else None
    if scan is None:
        problems.append(f"{queries}: no such file")
    else:
        lines += csv_section(scan, fields)
        problems += scan.problems
    gold_lines, gold_problems, gold_ids = _gold(root, scan, gold_fields)
    out_lines, out_problems = _outputs(root, pattern, output_fields, gold_ids)
    return lines + gold_lines + out_lines, problems + gold_problems + out_problems
