"""Datasets whose gold is in another layout: ``dataset=csv`` and ``dataset=hard518`` (the paper's release).

The instance file is CSV (:mod:`cts.data.csvfile`) or JSONL (:mod:`cts.data.jsonl`); the gold
is read through the declared mapping of :mod:`cts.gold.mapping` (``gold_fields``), in place:
nothing is copied. Gold records without ids are matched to instances by their intent query
(``fused_query``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cts.core.types import Gold, Instance
from cts.data.csvfile import read_instances_csv
from cts.data.jsonl import Dataset, Reading, _check_gold_coverage, read_instances_jsonl, with_clusters
from cts.gold.archive import GoldError
from cts.gold.mapping import GoldScan, scan_mapped_gold

log = logging.getLogger(__name__)

RELEASE_QUERIES = "data/hard_518_queries.csv"
"""The release's instance file, under the unzipped ``release/`` dir (project page)."""
RELEASE_GOLD = "data/gold_public_hard518.jsonl"
"""The release's gold file, under the unzipped ``release/`` dir (project page)."""


def gold_by_instance(scan: GoldScan, instances: Sequence[Instance]) -> dict[str, Gold]:
    """The scanned gold keyed by instance id (records keyed by intent query go to every instance with it)."""
    if not scan.by_query:
        return {g.instance_id: g for g in scan.golds}
    by_key = {g.instance_id: g for g in scan.golds}
    found = {i.id: scan.by_query.get(i.fused_query) for i in instances}
    return {i: replace(by_key[k], instance_id=i) for i, k in found.items() if k is not None}


def read_mapped_gold(
    path: str | Path, instances: Sequence[Instance], fields: Mapping[str, str | None] | None = None
) -> dict[str, Gold]:
    """Read a gold file through the mapping, refusing it on any bad record.

    Raises:
        GoldError: Every bad record as ``file:line: problem``, or one line when the file fits no layout.
        FileNotFoundError: The file does not exist.
    """
    scan = scan_mapped_gold(path, fields)
    if scan.problems:
        raise GoldError(list(scan.problems))
    if not scan.golds:
        raise GoldError([f"{scan.path}: no gold record"])
    used = ", ".join(f"{k}={v}" for k, v in scan.names.items() if v)
    log.info("%s: %d gold records read as %s", scan.path, len(scan.golds), used)
    return gold_by_instance(scan, instances)


def read_instances(path: str | Path, fields: Mapping[str, str] | None, max_field_chars: int) -> list[Instance]:
    """CSV or JSONL instances, by the file's suffix (``.csv``, ``.tsv`` is not read)."""
    if Path(path).suffix.lower() == ".csv":
        return read_instances_csv(path, fields, max_field_chars)
    return read_instances_jsonl(path, fields, max_field_chars)


@dataclass(frozen=True)
class MappedReading(Reading):
    """:class:`~cts.data.jsonl.Reading` and the gold file's mapping (``dataset=csv``, ``dataset=hard518``).

    Attributes:
        gold_fields: ``{mapping key: the file's key}`` (:data:`cts.gold.mapping.GOLD_NAMES`); unset keys are tried.
    """

    gold_fields: Mapping[str, str | None] | None = None


def load_mapped_dataset(
    path: str, gold_path: str, name: str | None = None, settings: MappedReading = MappedReading()
) -> Dataset:
    """Load instances (CSV or JSONL) and gold read through ``gold_fields`` (the ``dataset/csv`` option).

    Args:
        path: The instance file (``.csv``, else JSONL).
        gold_path: The gold JSONL file, in any layout the mapping reads.
        name: Dataset name (default: the instance file's stem).
        settings: How the files are read (the config's flat ``dataset.*`` keys, bound by the builder).

    Raises:
        DatasetError: Bad rows, instances without gold.
        GoldError: Bad gold records, or a gold file that fits no layout (one line).
    """
    fields, max_field_chars, only_with_gold = settings.fields, settings.max_field_chars, settings.only_with_gold
    cluster_field, gold_fields = settings.cluster_field, settings.gold_fields
    every = read_instances(path, fields, max_field_chars)
    gold = read_mapped_gold(gold_path, every, gold_fields)
    instances = _check_gold_coverage(every, gold, gold_path, only_with_gold)
    ids = {i.id for i in instances}
    left_out = tuple(i.id for i in every if i.id not in gold)
    dataset = Dataset(
        name=name or Path(path).stem,
        instances=tuple(instances),
        gold={i: g for i, g in gold.items() if i in ids},
        without_gold=left_out,
    )
    log.info("dataset %s: %d instances with gold", dataset.name, len(instances))
    return with_clusters(dataset, cluster_field)


def load_release_dataset(
    release: str,
    queries: str = RELEASE_QUERIES,
    gold: str = RELEASE_GOLD,
    name: str = "hard518",
    settings: MappedReading = MappedReading(),
) -> Dataset:
    """The paper's released benchmark, read in place from its unzipped dir (the ``dataset/hard518`` option).

    Args:
        release: The unzipped ``release/`` dir.
        queries: The instance file, relative to ``release``.
        gold: The gold file, relative to ``release``.
        name: The dataset's name.
        settings: How the files are read (the config's flat ``dataset.*`` keys, bound by the builder).

    Raises:
        FileNotFoundError: ``release`` is not a dir, or a file is missing (the message names the dir to unzip).
    """
    root = Path(release)
    if not root.is_dir():
        raise FileNotFoundError(f"dataset.release={release}: no such dir; unzip the release and name its release/ dir")
    return load_mapped_dataset(str(root / queries), str(root / gold), name, settings)
