"""Datasets: instances as JSONL (``jsonl``, the ``dataset=`` loader) and gold nugget files (``goldfile``)."""

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
