"""Made-up ClariQ and Qulac files (English and Chinese rows) written by the tests, in each release's format."""

from __future__ import annotations

import csv
import json
from pathlib import Path

HEADER = [
    "topic_id",
    "initial_request",
    "topic_desc",
    "clarification_need",
    "facet_id",
    "facet_desc",
    "question_id",
    "question",
    "answer",
]

# topic, request, need, facet, facet description, question id, question, answer
CLARIQ_ROWS: list[tuple[str, str, str, str, str, str, str, str]] = [
    (
        "1",
        "Tell me about glass frogs.",
        "4",
        "F1",
        'Find "glass frog" species of Costa Rica.',
        "Q1",
        "which country are you interested in",
        "costa rica",
    ),
    (
        "1",
        "Tell me about glass frogs.",
        "4",
        "F1",
        'Find "glass frog" species of Costa Rica.',
        "Q2",
        "do you want pet shops",
        "no",
    ),
    (
        "1",
        "Tell me about glass frogs.",
        "4",
        "F2",
        "Find pictures of glass frogs.",
        "Q1",
        "which country are you interested in",
        "i dont know",
    ),
    (
        "1",
        "Tell me about glass frogs.",
        "4",
        "F2",
        "Find pictures of glass frogs.",
        "Q3",
        "do you want pictures",
        "yes",
    ),
    ("2", "Tell me about the moon\\'s rocks.", "1", "F3", "Find the age of the moon\\'s rocks.", "", "", ""),
    ("3", "介绍一下长城", "3", "F4", "长城在北京的旅游路线", "Q4", "您问的是哪个地区？", "北京"),
    ("3", "介绍一下长城", "3", "F4", "长城在北京的旅游路线", "Q5", "您想了解历史吗？", "不知道"),
    ("3", "长城", "3", "F4", "长城在北京的旅游路线", "Q6", "您指的是哪段长城？", "八达岭"),
]


def write_clariq(path: Path, rows: list[tuple[str, ...]] | None = None, header: list[str] | None = None) -> Path:
    """A ClariQ ``.tsv``: tab-separated, a header, csv quoting (doubled quotes), ``\\'`` left as in the release."""
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(header or HEADER)
        for topic, request, need, facet, desc, qid, question, answer in rows or CLARIQ_ROWS:
            w.writerow([topic, request, "a topic description", need, facet, desc, qid, question, answer])
    return path


# topic_id, facet_id, topic, facet_desc, question, answer
QULAC_ROWS: list[tuple[int, int, str, str, str, str]] = [
    (1, 1, "glass frogs", 'Find \\"glass frog\\" pictures.', "do you want pictures", "yes"),
    (1, 1, "glass frogs", 'Find \\"glass frog\\" pictures.', "are you looking for a pet shop", "no i want photos"),
    (1, 2, "glass frogs", "Where do glass frogs live?", "do you want pictures", "no"),
    (2, 1, "长城", "长城在北京的旅游路线", "您问的是哪个地区？", "北京"),
]


def write_qulac(path: Path, rows: list[tuple[int, int, str, str, str, str]] | None = None) -> Path:
    """A column-oriented ``qulac.json``: a dict per column mapping the row index (a string) to its value."""
    cols: dict[str, dict[str, object]] = {
        c: {}
        for c in (
            "topic_id",
            "facet_id",
            "topic_facet_id",
            "topic_facet_question_id",
            "topic",
            "topic_type",
            "facet_type",
            "topic_desc",
            "facet_desc",
            "question",
            "answer",
        )
    }
    for i, (topic, facet, query, desc, question, answer) in enumerate(rows or QULAC_ROWS):
        key = str(i)
        values = {
            "topic_id": topic,
            "facet_id": facet,
            "topic_facet_id": f"{topic}-{facet}",
            "topic_facet_question_id": f"{topic}-{facet}-{i}",
            "topic": query,
            "topic_type": "faceted",
            "facet_type": "inf",
            "topic_desc": "a topic description",
            "facet_desc": desc,
            "question": question,
            "answer": answer,
        }
        for c, v in values.items():
            cols[c][key] = v
    path.write_text(json.dumps(cols, ensure_ascii=False), encoding="utf-8")
    return path
