"""``dataset=clariq`` and ``dataset=qulac``: instances per facet, the people's answers beside them, bad files refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from cts.data.clariq import load_clariq
from cts.data.jsonl import DatasetError
from cts.data.qulac import load_qulac
from tests.realism.files import CLARIQ_ROWS, HEADER, write_clariq, write_qulac


def test_clariq_instances_answers_and_clusters(tmp_path: Path):
    d = load_clariq(str(write_clariq(tmp_path / "train.tsv")))
    assert d.name == "clariq-train" and d.cluster_field == "topic"
    by_id = d.intent()
    assert sorted(by_id) == ["F1", "F2", "F3", "F4", "F4~1"]  # a second wording of a request: its own instance
    f1 = by_id["F1"]
    assert f1.blurred_query == "Tell me about glass frogs."
    assert f1.fused_query == 'Find "glass frog" species of Costa Rica.'  # csv quoting undone
    assert f1.meta == {"topic": "1", "language": "en", "clarification_need": 4}
    assert by_id["F3"].fused_query == "Find the age of the moon's rocks."  # \' as a plain quote
    assert by_id["F4"].meta["language"] == "zh" and by_id["F4~1"].blurred_query == "长城"
    # the need-1 row has no question: an instance without a pair
    assert [(a.instance_id, a.question_id, a.answer) for a in d.answers] == [
        ("F1", "Q1", "costa rica"),
        ("F1", "Q2", "no"),
        ("F2", "Q1", "i dont know"),
        ("F2", "Q3", "yes"),
        ("F4", "Q4", "北京"),
        ("F4", "Q5", "不知道"),
        ("F4~1", "Q6", "八达岭"),
    ]


def test_clariq_bad_rows_name_file_and_line(tmp_path: Path):
    rows = [*CLARIQ_ROWS[:2], ("1", "Tell me about glass frogs.", "5", "F9", "x", "Q1", "q", "a")]
    with pytest.raises(DatasetError) as e:
        load_clariq(str(write_clariq(tmp_path / "bad.tsv", rows)))
    assert e.value.problems == [f"{tmp_path / 'bad.tsv'}:4: clarification_need: expected 1, 2, 3 or 4, got '5'"]
    clash = [*CLARIQ_ROWS[:1], ("1", "Tell me about glass frogs.", "4", "F1", "another description", "Q2", "q", "a")]
    with pytest.raises(DatasetError, match=r"bad2.tsv:3: facet F1: description, topic or need differs"):
        load_clariq(str(write_clariq(tmp_path / "bad2.tsv", clash)))
    with pytest.raises(DatasetError, match="missing column.*answer"):
        load_clariq(str(write_clariq(tmp_path / "cols.tsv", header=HEADER[:-1] + ["reply"])))
    with pytest.raises(DatasetError, match="no such file"):
        load_clariq(str(tmp_path / "nope.tsv"))


def test_qulac_instances_and_answers(tmp_path: Path):
    d = load_qulac(str(write_qulac(tmp_path / "qulac.json")))
    assert d.name == "qulac"
    by_id = d.intent()
    assert sorted(by_id) == ["1-1", "1-2", "2-1"]
    assert by_id["1-1"].blurred_query == "glass frogs"
    assert by_id["1-1"].fused_query == 'Find "glass frog" pictures.'
    assert by_id["1-1"].meta == {"topic": "1", "language": "en"}  # no clarification_need in Qulac
    assert by_id["2-1"].fused_query == "长城在北京的旅游路线"
    assert [(a.instance_id, a.answer) for a in d.answers] == [
        ("1-1", "yes"),
        ("1-1", "no i want photos"),
        ("1-2", "no"),
        ("2-1", "北京"),
    ]


def test_qulac_wrong_layout_is_refused(tmp_path: Path):
    (tmp_path / "rows.json").write_text('[{"topic": "x"}]', encoding="utf-8")
    with pytest.raises(DatasetError, match="expected a dict per column"):
        load_qulac(str(tmp_path / "rows.json"))
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    with pytest.raises(DatasetError, match="not a JSON file"):
        load_qulac(str(tmp_path / "broken.json"))
