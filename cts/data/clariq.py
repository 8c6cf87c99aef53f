"""ClariQ (Aliannejadi et al., 2020/2021) as a dataset of real answers: ``dataset=clariq``.

    python -m cts.realism clariq dataset.path=<your copy>/train.tsv ua=rules

A release file (``train.tsv``, ``dev.tsv``, ``test_with_labels.tsv``) is tab-separated with a header:
``topic_id, initial_request, topic_desc, clarification_need, facet_id, facet_desc, question_id,
question, answer``. One instance per facet (q = ``initial_request``, q* = ``facet_desc``, cluster =
``topic_id``); ``clarification_need`` (1-4) is kept in ``meta``. See :mod:`cts.data.human_answers`.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from cts.data.human_answers import HumanAnswerDataset, Row, build_dataset, unescape
from cts.data.jsonl import DatasetError

__all__ = ["COLUMNS", "load_clariq", "read_clariq_rows"]

COLUMNS: tuple[str, ...] = (
    "topic_id",
    "initial_request",
    "topic_desc",
    "clarification_need",
    "facet_id",
    "facet_desc",
    "question_id",
    "question",
    "answer",
)
_NEEDS = ("1", "2", "3", "4")


def read_clariq_rows(path: Path) -> Iterator[Row]:
    """The file's rows, each checked (every column present, a need of 1-4, a request and a facet).

    Raises:
        DatasetError: A missing column, or every bad row as ``file:line: field: problem``.
    """
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t")
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise DatasetError(
                [f"{path}:1: missing column(s) {', '.join(missing)} (a ClariQ .tsv has {', '.join(COLUMNS)})"]
            )
        problems: list[str] = []
        rows = [row for n, raw in enumerate(reader, start=2) if (row := _row(path, n, raw, problems)) is not None]
    if problems:
        raise DatasetError(problems[:20] + ([f"... {len(problems) - 20} more"] if len(problems) > 20 else []))
    yield from rows


def _row(path: Path, line: int, raw: dict[str, str | None], problems: list[str]) -> Row | None:
    value = {c: unescape(raw.get(c) or "") for c in COLUMNS}
    where = f"{path}:{line}"
    if value["clarification_need"] not in _NEEDS:
        problems.append(f"{where}: clarification_need: expected 1, 2, 3 or 4, got {value['clarification_need']!r}")
        return None
    for col in ("topic_id", "initial_request", "facet_id", "facet_desc"):
        if not value[col]:
            problems.append(f"{where}: {col}: empty")
            return None
    return Row(
        where=where,
        topic=value["topic_id"],
        request=value["initial_request"],
        facet=value["facet_id"],
        facet_desc=value["facet_desc"],
        question_id=value["question_id"],
        question=value["question"],
        answer=value["answer"],
        need=int(value["clarification_need"]),
    )


def load_clariq(path: str, name: str | None = None) -> HumanAnswerDataset:
    """Load one ClariQ split (the ``dataset=clariq`` option).

    Args:
        path: The split's ``.tsv`` file.
        name: Dataset name (default: ``clariq-<file stem>``, e.g. ``clariq-train``).

    Raises:
        DatasetError: No such file, a missing column or bad rows.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise DatasetError([f"dataset.path: no such file: {path} (a ClariQ split, e.g. train.tsv)"])
    return build_dataset(name or f"clariq-{file.stem}", read_clariq_rows(file), str(file))
