"""The released output files: candidate and clarify-only readers, file names, one line per bad record."""

from __future__ import annotations

from pathlib import Path

import pytest

from cts.core.types import UNKNOWN
from cts.data.csvfile import derived_id
from cts.release.outputs import OutputLayoutError, scan_outputs, system_and_k, unknown_ids
from tests.release.fixture import ANSWERS, PAIRS, jsonl


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ebk1__cand_hard518.jsonl", ("eb", 1)),
        ("deepseekk3__clarify_hard518.jsonl", ("deepseek", 3)),
        ("gpt_k2.jsonl", ("gpt", 2)),
        ("orig__cand_hard518.jsonl", ("orig", 0)),
    ],
)
def test_the_file_name_says_system_and_k(name: str, expected: tuple[str, int]) -> None:
    assert system_and_k(name) == expected


def test_a_name_without_k_is_one_line_naming_the_option() -> None:
    with pytest.raises(OutputLayoutError, match="--name-pattern"):
        system_and_k("results.jsonl")
    assert system_and_k("run-ERNIE-b2.jsonl", r"run-(?P<system>\w+)-b(?P<k>\d)") == ("ERNIE", 2)


def test_candidates_in_the_default_and_in_other_names(tmp_path: Path) -> None:
    default = scan_outputs(
        jsonl(tmp_path / "a.jsonl", [{"id": i, "answer": a} for i, a in ANSWERS.items()]), "candidates"
    )
    other = scan_outputs(
        jsonl(tmp_path / "b.jsonl", [{"qid": i, "prediction": a, "score": 50} for i, a in ANSWERS.items()]),
        "candidates",
    )
    assert [(r.id, r.answer) for r in default.rows] == [(r.id, r.answer) for r in other.rows] == list(ANSWERS.items())
    assert other.names["id"] == "qid" and other.names["answer"] == "prediction" and other.rows[0].score == 50.0


def test_rows_without_ids_get_the_query_files_derived_ids(tmp_path: Path) -> None:
    rows = [{"blurred_query": b, "fused_query": f, "answer": ANSWERS[i]} for i, b, f in PAIRS]
    scan = scan_outputs(jsonl(tmp_path / "a.jsonl", rows), "candidates")
    assert [r.id for r in scan.rows] == [derived_id(b, f) for _, b, f in PAIRS]


def test_clarify_only_as_lists_and_as_pairs(tmp_path: Path) -> None:
    lists = jsonl(
        tmp_path / "a.jsonl",
        [
            {
                "id": "q1",
                "questions": ["您在哪个城市？", "哪一年？"],
                "answers": ["未知", "2024年"],
                "rewritten_query": "改写",
            }
        ],
    )
    pairs = jsonl(
        tmp_path / "b.jsonl",
        [
            {
                "id": "q1",
                "qa_pairs": [{"question": "您在哪个城市？", "answer": "Unknown."}, {"q": "哪一年？", "a": "2024年"}],
                "rewrite": "改写",
            }
        ],
    )
    for path in (lists, pairs):
        (row,) = scan_outputs(path, "clarify_only").rows
        assert (
            row.questions == ("您在哪个城市？", "哪一年？")
            and row.answers == (UNKNOWN, "2024年")
            and row.query == "改写"
        )


def test_a_file_that_fits_no_layout_is_one_line(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "a.jsonl", [{"id": "q1", "模型输出": "答案"}])
    with pytest.raises(OutputLayoutError) as e:
        scan_outputs(path, "candidates")
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{path}:1: the candidates file fits no name of 'answer'")
    assert "['id', '模型输出']" in line and "--field answer=" in line
    (row,) = scan_outputs(path, "candidates", {"answer": "模型输出"}).rows
    assert row.answer == "答案"


def test_bad_records_are_one_line_each_and_no_good_row_is_lost(tmp_path: Path) -> None:
    rows = [{"id": i, "answer": a} for i, a in ANSWERS.items()]
    path = tmp_path / "a.jsonl"
    path.write_bytes(
        b"".join(
            f'{{"id": "{r["id"]}", "answer": "{r["answer"]}"}}\n'.encode("gb18030" if r["id"] == "q2" else "utf-8")
            for r in rows
        )
        + '{"id": "q1", "answer": "again"}\n{"id": "q9", "answer": "答案"}\n'.encode()
    )
    scan = scan_outputs(path, "candidates")
    assert [r.id for r in scan.rows] == ["q1", "q3", "q4", "q9"]
    assert [p.split(": ", 1)[0] for p in scan.problems] == [f"{path}:2", f"{path}:5"]
    assert "invalid UTF-8" in scan.problems[0] and "duplicate id 'q1' (first at line 1)" in scan.problems[1]
    assert unknown_ids(scan, {"q1", "q2", "q3", "q4"}, "the gold") == [f"{path}:6: id 'q9' is not in the gold"]
