"""Datasets: instances as JSONL (``jsonl``, the ``dataset=`` loader, which reads gold with :mod:`cts.gold.file`)."""

from cts.data.jsonl import (
    MAX_FIELD_CHARS,
    PAPER_FIELDS,
    Dataset,
    DatasetError,
    dataset_metrics,
    load_jsonl_dataset,
    read_instances_jsonl,
    select_instances,
    write_instances_jsonl,
)

__all__ = [
    "MAX_FIELD_CHARS",
    "PAPER_FIELDS",
    "Dataset",
    "DatasetError",
    "dataset_metrics",
    "load_jsonl_dataset",
    "read_instances_jsonl",
    "select_instances",
    "write_instances_jsonl",
]
