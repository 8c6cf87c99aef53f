"""Qulac (Aliannejadi et al., SIGIR 2019) as a dataset of real answers: ``dataset=qulac``.

    python -m cts.realism qulac dataset.path=<your copy>/qulac.json ua=rules

``qulac.json`` is column-oriented: a dict per column (``topic_id``, ``facet_id``,
``topic_facet_id``, ``topic``, ``facet_desc``, ``question``, ``answer`` ...), each mapping a row
index to its value. One instance per ``topic_facet_id`` (q = ``topic``, the query people typed;
q* = ``facet_desc``; cluster = ``topic_id``). Qulac has no clarification-need label.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cts.data.human_answers import HumanAnswerDataset, Row, build_dataset, unescape
from cts.data.jsonl import DatasetError

__all__ = ["COLUMNS", "load_qulac", "read_qulac_rows"]

COLUMNS: tuple[str, ...] = (
    "topic_id",
    "topic_facet_id",
    "topic_facet_question_id",
    "topic",
    "facet_desc",
    "question",
    "answer",
)


def read_qulac_rows(path: Path) -> Iterator[Row]:
    """The file's rows in index order, each checked.

    Raises:
        DatasetError: Not JSON, a missing column, or every bad row as ``file:index: field: problem``.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DatasetError([f"{path}: not a JSON file: {e}"]) from e
    if not isinstance(data, Mapping) or any(not isinstance(data.get(c), Mapping) for c in COLUMNS):
        raise DatasetError([f"{path}: expected a dict per column with {', '.join(COLUMNS)} (Qulac's qulac.json)"])
    problems: list[str] = []
    rows = [r for key in sorted(data["topic_id"], key=_index) if (r := _row(path, key, data, problems)) is not None]
    if problems:
        raise DatasetError(problems[:20] + ([f"... {len(problems) - 20} more"] if len(problems) > 20 else []))
    yield from rows


def _index(key: str) -> tuple[int, str]:
    return (int(key), "") if str(key).isdigit() else (1 << 62, str(key))


def _row(path: Path, key: str, data: Mapping[str, Mapping[str, Any]], problems: list[str]) -> Row | None:
    value = {c: unescape(str(data[c].get(key) or "")) for c in COLUMNS}
    where = f"{path}:{key}"
    for col in ("topic_id", "topic", "topic_facet_id", "facet_desc"):
        if not value[col]:
            problems.append(f"{where}: {col}: empty or missing")
            return None
    return Row(
        where=where,
        topic=value["topic_id"],
        request=value["topic"],
        facet=value["topic_facet_id"],
        facet_desc=value["facet_desc"],
        question_id=value["topic_facet_question_id"] or key,
        question=value["question"],
        answer=value["answer"],
    )


def load_qulac(path: str, name: str | None = None) -> HumanAnswerDataset:
    """Load Qulac's ``qulac.json`` (the ``dataset=qulac`` option).

    Args:
        path: The ``qulac.json`` file.
        name: Dataset name (default: ``qulac``).

    Raises:
        DatasetError: No such file, not Qulac's layout, or bad rows.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise DatasetError([f"dataset.path: no such file: {path} (Qulac's qulac.json)"])
    return build_dataset(name or "qulac", read_qulac_rows(file), str(file))
