"""Reading human nugget labels: JSONL and CSV, every problem reported with its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cts.data.human_labels import LabelsError, import_labels, imported_labels, read_labels


def test_jsonl_and_csv_read_the_same(tmp_path: Path) -> None:
    jsonl = tmp_path / "l.jsonl"
    jsonl.write_text(
        '{"instance_id": "q1", "arm": "orig", "nugget_id": "n1", "label": "Full", "annotator": "ann"}\n\n'
        '{"instance": "q1", "arm": "orig", "nugget": "n2", "label": "none", "annotator": 7}\n',
        encoding="utf-8",
    )
    csv = tmp_path / "l.csv"
    csv.write_text("instance,arm,nugget,label,annotator\nq1,orig,n1,full,ann\nq1,orig,n2,NONE,7\n", encoding="utf-8")
    got = [(x.unit, x.label, x.annotator) for x in read_labels(jsonl)]
    assert got == [(x.unit, x.label, x.annotator) for x in read_labels(csv)]
    assert got == [(("q1", "orig", "n1"), "full", "ann"), (("q1", "orig", "n2"), "none", "7")]
    assert [x.line for x in read_labels(jsonl)] == [1, 3]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"instance": "q1", "arm": "orig", "nugget": "n1", "label": "full", "annotator": "a"}\n'
        '{"instance": "q1", "arm": "orig", "nugget": "n1", "label": "none", "annotator": "a"}\n'
        '{"instance": "q1", "arm": "", "nugget": "n2", "label": "meh", "annotator": "a"}\n'
        "not json\n",
        encoding="utf-8",
    )
    with pytest.raises(LabelsError) as e:
        read_labels(path)
    assert e.value.problems == [
        f"{path}:2: label: a labelled n1 of q1/orig full on line 1 and none here",
        f"{path}:3: arm: missing or empty",
        f"{path}:3: label: 'meh' is not one of full, partial, none",
        f"{path}:4: row: invalid JSON (Expecting value)",
    ]


def test_an_import_is_kept_in_the_sweep(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    path.write_text("instance,arm,nugget,label,annotator\n苹果-1,orig,n1,partial,标注员\n", encoding="utf-8")
    labels = read_labels(path)
    assert imported_labels(tmp_path / "sweep") is None
    import_labels(tmp_path / "sweep", labels, {"苹果-1": {"n1": 2, "n2": 1}, "other": {"n1": 3}})
    again, weights = imported_labels(tmp_path / "sweep")  # type: ignore[misc]
    assert [(x.unit, x.label, x.annotator) for x in again] == [(("苹果-1", "orig", "n1"), "partial", "标注员")]
    assert weights == {"苹果-1": {"n1": 2, "n2": 1}}
