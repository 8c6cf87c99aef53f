"""Datasets: instances as JSONL (``jsonl``, the ``dataset=`` loader, which reads gold with :mod:`cts.gold.file`).

CSV instances: :mod:`cts.data.csvfile`; gold in another layout (``dataset=csv``, ``dataset=hard518``):
:mod:`cts.data.release`, through the mapping of :mod:`cts.gold.mapping`.
"""

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
