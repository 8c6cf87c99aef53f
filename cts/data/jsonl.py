"""Benchmark datasets: JSONL instances with their static gold, validated on load.

A row of the instance file is one JSON object. The file's field names are
mapped onto the paper's (``id``, ``blurred_query``, ``fused_query``) through
``fields``; every other key goes to :attr:`cts.core.types.Instance.meta` (a ``meta``
object, as written by :func:`write_instances_jsonl`, is merged into it).

Validation policy (every row is checked; all problems are reported at once as
``file:line: field: problem`` in one :class:`DatasetError`, nothing is dropped):

* errors: undecodable UTF-8, invalid JSON, a row that is not an object, a
  missing or null field, a value that is not a string (ids may also be
  integers, which are stringified), an empty or blank string, a duplicate id,
  a ``meta`` key that is not an object, a paper field longer than
  ``max_field_chars`` characters, a file without any row;
* warning (logged, the row is kept): ``blurred_query`` equal to
  ``fused_query`` after normalisation. Such a row has nothing to clarify, but it
  is still a well-formed instance of the protocol (clarification can only
  match orig), so refusing the whole benchmark over it would be wrong;
* blank lines are not rows and are skipped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cts._util.io import write_jsonl
from cts.core.types import Gold, Instance
from cts.data.clusters import cluster_problem
from cts.gold.file import open_gold
from cts.text.tokens import normalize

log = logging.getLogger(__name__)

PAPER_FIELDS: tuple[str, ...] = ("id", "blurred_query", "fused_query")
MAX_FIELD_CHARS = 4000
"""Default longest accepted value of a paper field (a query far longer is a broken row)."""


class DatasetError(ValueError):
    """A dataset file is unusable; ``problems`` lists every ``file:line: field: problem``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Dataset:
    """Benchmark instances and their static gold (keyed by instance id)."""

    name: str
    instances: tuple[Instance, ...]
    gold: Mapping[str, Gold]
    without_gold: tuple[str, ...] = ()
    """Ids left out because they have no gold (only with ``only_with_gold``)."""
    cluster_field: str | None = None
    """The meta key naming each instance's cluster (topic, source id); None = independent instances."""


def write_instances_jsonl(instances: Iterable[Instance], path: str | Path) -> None:
    """Atomically write instances in the paper's field names (inverse of the reader).

    Args:
        instances: The instances to write.
        path: Destination JSONL file.
    """
    rows = (
        {
            "id": i.id,
            "blurred_query": i.blurred_query,
            "fused_query": i.fused_query,
            "meta": dict(i.meta),
        }
        for i in instances
    )
    write_jsonl(rows, path)


def _field_map(fields: Mapping[str, str | None] | None) -> dict[str, str]:
    """Complete ``{paper name: file name}``; reject names the paper does not have."""
    given = dict(fields or {})
    unknown = sorted(set(given) - set(PAPER_FIELDS))
    if unknown:
        raise DatasetError([f"fields: unknown paper field(s) {unknown}; expected {list(PAPER_FIELDS)}"])
    return {p: given.get(p) or p for p in PAPER_FIELDS}


def _check_value(paper: str, value: Any, max_chars: int) -> tuple[str | None, str | None]:
    """Return ``(value as str, None)`` or ``(None, problem)`` for one required field."""
    if value is None:
        return None, "missing"
    if paper == "id" and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        allowed = "a string or an integer" if paper == "id" else "a string"
        return None, f"must be {allowed}, got {type(value).__name__}"
    if not value.strip():
        return None, "empty string"
    if len(value) > max_chars:
        return None, f"{len(value):,} characters, longer than max_field_chars={max_chars}"
    return value, None


def _parse_row(
    row: Any, fmap: Mapping[str, str], max_chars: int = MAX_FIELD_CHARS
) -> tuple[Instance | None, list[str]]:
    """Turn one decoded row into an Instance, or return ``field: problem`` strings."""
    if not isinstance(row, dict):
        return None, [f"<row>: must be a JSON object, got {type(row).__name__}"]
    problems: list[str] = []
    values: dict[str, str] = {}
    for paper, name in fmap.items():
        value, problem = _check_value(paper, row.get(name), max_chars)
        if value is None:  # then there is a problem (_check_value gives one or the other)
            problems.append(f"{name}: {problem}")
        else:
            values[paper] = value
    extra = {k: v for k, v in row.items() if k not in fmap.values()}
    nested = extra.pop("meta", {})
    if not isinstance(nested, dict):
        problems.append(f"meta: must be an object, got {type(nested).__name__}")
    if problems:
        return None, problems
    return Instance(meta={**extra, **nested}, **values), []


def _decode_lines(path: Path) -> Iterable[tuple[int, Any | None, str | None]]:
    """Yield ``(line number, decoded row, problem)`` for each non-blank line."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                yield lineno, None, f"<row>: invalid UTF-8 ({e.reason} at byte {e.start})"
                continue
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line), None
            except json.JSONDecodeError as e:
                yield lineno, None, f"<row>: invalid JSON ({e.msg} at column {e.colno})"


def read_instances_jsonl(
    path: str | Path, fields: Mapping[str, str] | None = None, max_field_chars: int = MAX_FIELD_CHARS
) -> list[Instance]:
    """Read and validate every row of a JSONL instance file.

    Args:
        path: The JSONL file.
        fields: ``{paper name: file name}`` for ``id``, ``blurred_query`` and
            ``fused_query``; unmapped names default to the paper's.
        max_field_chars: Longest accepted value of a paper field.

    Returns:
        The instances in file order.

    Raises:
        DatasetError: Listing every bad row as ``file:line: field: problem``.
        FileNotFoundError: If ``path`` does not exist.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"dataset file not found: {p}")
    fmap = _field_map(fields)
    instances: list[Instance] = []
    problems: list[str] = []
    first_line: dict[str, int] = {}
    for lineno, row, problem in _decode_lines(p):
        inst, row_problems = (None, [problem]) if problem else _parse_row(row, fmap, max_field_chars)
        if inst is not None and inst.id in first_line:
            row_problems = [f"{fmap['id']}: duplicate id {inst.id!r} (first at line {first_line[inst.id]})"]
        problems.extend(f"{p}:{lineno}: {msg}" for msg in row_problems)
        if inst is None or row_problems:
            continue
        first_line[inst.id] = lineno
        instances.append(inst)
        if normalize(inst.blurred_query) == normalize(inst.fused_query):
            log.warning("%s:%d: blurred_query equals fused_query (nothing to clarify)", p, lineno)
    if problems:
        raise DatasetError(problems)
    if not instances:
        raise DatasetError([f"{p}: no instances (the file has no rows)"])
    return instances


def with_clusters(dataset: Dataset, field: str | None) -> Dataset:
    """``dataset`` with its ``cluster_field`` set, after checking every instance has the field.

    Raises:
        DatasetError: Some instance has no usable ``meta[field]`` (one line: :func:`cts.data.clusters.cluster_problem`).
    """
    if field is None:
        return dataset
    problem = cluster_problem(dataset.instances, field)
    if problem is not None:
        raise DatasetError([problem])
    return replace(dataset, cluster_field=field)


def _without_gold_message(missing: Sequence[str], n: int, gold_path: str) -> str:
    failures = Path(gold_path).parent / "failures.jsonl"
    why = f"; why: see {failures}" if failures.is_file() else ""
    return (
        f"{gold_path}: no gold for {len(missing)} of {n} instance(s): {_some(missing)}{why}; "
        "rebuild the gold, or evaluate only the instances with gold: dataset.only_with_gold=true"
    )


def _check_gold_coverage(
    instances: Sequence[Instance], gold: Mapping[str, Gold], gold_path: str, only_with_gold: bool = False
) -> list[Instance]:
    """The instances to evaluate: refuse (or, if allowed, leave out and log) those without gold.

    Also refuses gold that was built for another ``fused_query``.
    """
    missing = [i.id for i in instances if i.id not in gold]
    if missing and not only_with_gold:
        raise DatasetError([_without_gold_message(missing, len(instances), gold_path)])
    kept = [i for i in instances if i.id in gold]
    if missing:
        log.warning(
            "%s: %d of %d instance(s) have no gold and are left out (dataset.only_with_gold=true): %s",
            gold_path,
            len(missing),
            len(instances),
            _some(missing),
        )
    if not kept:
        raise DatasetError([f"{gold_path}: none of the {len(instances)} instance(s) has gold"])
    # Gold built by cts.gold records its fused_query; released gold may not (then trusted).
    stale = [i.id for i in kept if gold[i.id].provenance.get("fused_query", i.fused_query) != i.fused_query]
    if stale:
        msg = f"gold was built for a different fused_query for {len(stale)} instance(s)"
        raise DatasetError([f"{gold_path}: {msg}: {_some(stale)}"])
    return kept


def select_instances(dataset: Any, limit: int | None) -> list[Instance]:
    """The first ``limit`` instances (all when None or 0); refuse a dataset with none.

    Raises:
        DatasetError: The dataset has no instance (a job over nothing reports nothing).
    """
    instances = list(dataset.instances)
    if not instances:
        raise DatasetError([f"dataset {getattr(dataset, 'name', '')!r}: no instances"])
    return instances[:limit] if limit else instances


def dataset_metrics(dataset: Any) -> dict[str, float]:
    """Counts a job logs about its dataset: ``n_without_gold`` (instances left out for lack of gold).

    Args:
        dataset: A :class:`Dataset` (or another loader's object; then nothing was left out).
    """
    return {"n_without_gold": float(len(getattr(dataset, "without_gold", ())))}


def _some(ids: Sequence[str], n: int = 20) -> str:
    return ", ".join(ids[:n]) + (" ..." if len(ids) > n else "")


@dataclass(frozen=True)
class Reading:
    """How a dataset file is read and which instances are kept (the ``dataset.*`` keys the file options share).

    Attributes:
        fields: ``{paper name: the file's name}`` for ``id``, ``blurred_query``, ``fused_query``.
        max_field_chars: Longest accepted value of a paper field.
        only_with_gold: Leave out (and log) instances without gold instead of refusing.
        cluster_field: The meta key of each instance's cluster (:mod:`cts.data.clusters`); None = none.
    """

    fields: Mapping[str, str] | None = None
    max_field_chars: int = MAX_FIELD_CHARS
    only_with_gold: bool = False
    cluster_field: str | None = None


def load_jsonl_dataset(path: str, gold_path: str, name: str | None = None, settings: Reading = Reading()) -> Dataset:
    """Load a JSONL dataset and its archived static gold (the ``dataset/jsonl`` option).

    Gold is read-only here: an invalid gold file is refused, never rebuilt.

    Args:
        path: The instance JSONL file.
        gold_path: The gold JSONL file (``gold.jsonl`` of a gold archive).
        name: Dataset name (default: the instance file's stem).
        settings: How the file is read (the config's flat ``dataset.*`` keys, bound by the builder).

    Returns:
        The dataset, with gold restricted to its instances.

    Raises:
        DatasetError: Bad rows, instances without (matching) gold or without a cluster.
        cts.gold.GoldError: The gold file does not validate.
    """

    every = read_instances_jsonl(Path(path), settings.fields, settings.max_field_chars)
    gold = open_gold(Path(gold_path))  # validated; parsed again per instance when used (flat memory)
    instances = _check_gold_coverage(every, gold, gold_path, settings.only_with_gold)
    extra = len(set(gold) - {i.id for i in instances})
    if extra:
        log.info("%s: %d gold entries have no instance in %s (ignored)", gold_path, extra, path)
    name = name or Path(path).stem
    log.info("dataset %s: %d instances with gold", name, len(instances))
    own = gold.restrict(i.id for i in instances)  # read-only
    left_out = tuple(i.id for i in every if i.id not in gold)
    dataset = Dataset(name=name, instances=tuple(instances), gold=own, without_gold=left_out)
    return with_clusters(dataset, settings.cluster_field)
