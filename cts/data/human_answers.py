"""Datasets of real people's answers to clarifying questions (ClariQ, Qulac) as cts instances.

One instance per facet: ``blurred_query`` is the person's request (the topic's query),
``fused_query`` the facet description (the intent they held), ``meta["topic"]`` the cluster.
Beside the instances, every (facet, question) pair with the answer the person actually gave
(:class:`HumanAnswer`); ClariQ's ``clarification_need`` (1-4, per topic) rides in ``meta``.
The files are read where the user keeps them; nothing of them is committed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cts.core.types import Gold, Instance
from cts.data.jsonl import DatasetError
from cts.text.tokens import language

__all__ = ["HumanAnswer", "HumanAnswerDataset", "Row", "build_dataset", "unescape"]

_ESCAPED_QUOTE = re.compile(r"\\+(['\"])")


def unescape(text: str) -> str:
    """``\\'`` and ``\\"`` (backslash-escaped quotes left in both releases) as plain quotes, edges trimmed."""
    return _ESCAPED_QUOTE.sub(r"\1", text).strip()


@dataclass(frozen=True)
class HumanAnswer:
    """One clarifying question about one facet, and what the person who held that facet replied."""

    instance_id: str
    """The facet's instance id."""
    question_id: str
    question: str
    answer: str


@dataclass(frozen=True)
class Row:
    """One parsed line of a release (any format), before grouping into instances."""

    where: str
    """``file:line`` (or ``file:index``) for error messages."""
    topic: str
    request: str
    facet: str
    facet_desc: str
    question_id: str
    question: str
    answer: str
    need: int | None = None


@dataclass(frozen=True)
class HumanAnswerDataset:
    """Instances (one per facet) and the human answers beside them; no gold (nothing is searched)."""

    name: str
    instances: tuple[Instance, ...]
    answers: tuple[HumanAnswer, ...]
    gold: Mapping[str, Gold] = field(default_factory=dict)
    cluster_field: str | None = "topic"
    without_gold: tuple[str, ...] = ()

    def intent(self) -> dict[str, Instance]:
        """Instance id -> instance."""
        return {i.id: i for i in self.instances}


def build_dataset(name: str, rows: Iterable[Row], source: str) -> HumanAnswerDataset:
    """Group rows into facet instances and their answered pairs.

    A facet asked under several wordings of its request (ClariQ's test split) is one instance
    per wording. Rows without a question or an answer (ClariQ's requests that need no clarification)
    still make their facet an instance; they add no pair. A facet whose request, description
    or need differs between rows is an error (the file is not what it claims to be).

    Raises:
        DatasetError: Inconsistent facets or no row at all, each problem as ``file:line: ...``.
    """
    facets: dict[tuple[str, str], Instance] = {}
    answers: dict[tuple[str, str], HumanAnswer] = {}
    problems: list[str] = []
    wordings: dict[str, int] = {}  # requests seen per facet
    for row in rows:
        if (row.facet, row.request) not in facets:
            facets[(row.facet, row.request)] = _instance(row, wordings.get(row.facet, 0))
            wordings[row.facet] = wordings.get(row.facet, 0) + 1
        inst = facets[(row.facet, row.request)]
        if (inst.fused_query, inst.meta.get("topic"), inst.meta.get("clarification_need")) != _facet_key(row):
            problems.append(f"{row.where}: facet {row.facet}: description, topic or need differs from an earlier row")
        if row.question and row.answer and (inst.id, row.question_id) not in answers:
            answers[(inst.id, row.question_id)] = HumanAnswer(inst.id, row.question_id, row.question, row.answer)
    if not facets:
        problems.append(f"{source}: no row")
    if problems:
        raise DatasetError(problems[:20])
    return HumanAnswerDataset(name=name, instances=tuple(facets.values()), answers=tuple(answers.values()))


def _facet_key(row: Row) -> tuple[str, str, int | None]:
    return row.facet_desc, row.topic, row.need


def _instance(row: Row, n_before: int) -> Instance:
    """The facet's instance for this request; a facet asked by a second wording of the request gets ``<id>~1`` ..."""
    meta: dict[str, object] = {"topic": row.topic, "language": language(row.facet_desc or row.request)}
    if row.need is not None:
        meta["clarification_need"] = row.need
    return Instance(
        id=row.facet if not n_before else f"{row.facet}~{n_before}",
        blurred_query=row.request,
        fused_query=row.facet_desc,
        meta=meta,
    )
