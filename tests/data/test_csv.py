"""The CSV instance reader (dataset=csv, the release's query file): every variant it accepts, every bad row one line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cts.data.csvfile import derived_id, read_instances_csv, scan_instances_csv
from cts.data.jsonl import DatasetError
from tests.release.fixture import PAIRS, csv_text, queries_csv


def _ids(path: Path) -> list[str]:
    return [i.id for i in read_instances_csv(path)]


@pytest.mark.parametrize("bom", [True, False])
@pytest.mark.parametrize("crlf", [True, False])
def test_bom_and_line_ends_read_the_same(tmp_path: Path, bom: bool, crlf: bool) -> None:
    instances = read_instances_csv(queries_csv(tmp_path / "q.csv", bom=bom, crlf=crlf))
    assert [(i.id, i.blurred_query, i.fused_query) for i in instances] == list(PAIRS)  # Chinese text intact


def test_quoted_commas_quotes_and_newlines_stay_in_their_cell(tmp_path: Path) -> None:
    value = '第一行，含逗号, 和"引号"\r\n第二行'
    path = tmp_path / "q.csv"
    path.write_text(
        csv_text(
            [
                ["id", "blurred_query", "fused_query", "topic"],
                ["a", value, "意图", "摄影"],
                ["b", "查询", "意图二", "展览"],
            ]
        ),
        encoding="utf-8",
        newline="",
    )
    a, b = read_instances_csv(path)
    assert a.blurred_query == value and a.meta == {"topic": "摄影"} and b.id == "b"


def test_without_an_id_column_ids_are_derived_stably_and_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = queries_csv(tmp_path / "q.csv", with_id=False)
    with caplog.at_level(logging.INFO, logger="cts.data.csvfile"):
        ids = _ids(path)
    assert ids == [derived_id(b, f) for _, b, f in PAIRS] and len(set(ids)) == len(PAIRS)
    assert "ids are sha256" in caplog.text
    reordered = tmp_path / "r.csv"
    rows = [["blurred_query", "fused_query"], *[[b, f] for _, b, f in reversed(PAIRS)]]
    reordered.write_text(csv_text(rows), encoding="utf-8", newline="")
    assert _ids(reordered) == list(reversed(ids))  # an id follows its row, not its position


def test_a_mapped_column_name(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text(csv_text([["qid", "模糊查询", "意图查询"], ["7", "查询", "意图"]]), encoding="utf-8", newline="")
    (inst,) = read_instances_csv(path, {"id": "qid", "blurred_query": "模糊查询", "fused_query": "意图查询"})
    assert (inst.id, inst.blurred_query, inst.fused_query) == ("7", "查询", "意图")


def _one_problem(path: Path, n_good: int) -> str:
    scan = scan_instances_csv(path)
    assert len(scan.problems) == 1, scan.problems
    assert len(scan.instances) == n_good  # no good row lost
    with pytest.raises(DatasetError) as e:
        read_instances_csv(path)
    assert e.value.problems == list(scan.problems)
    return scan.problems[0]


def test_a_missing_column_is_one_line_naming_the_key_to_set(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text(csv_text([["id", "blurred", "fused_query"], ["a", "查询", "意图"]]), encoding="utf-8", newline="")
    line = _one_problem(path, 0)
    assert line.startswith(f"{path}:1: blurred_query: no such column") and "dataset.fields.blurred_query=" in line


def test_a_duplicate_id_keeps_the_first_row(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    rows = [
        ["id", "blurred_query", "fused_query"],
        ["a", "查询", "意图"],
        ["b", "查询二", "意图二"],
        ["a", "查询三", "意图三"],
    ]
    path.write_text(csv_text(rows), encoding="utf-8", newline="")
    assert _one_problem(path, 2) == f"{path}:4: id: duplicate id 'a' (first at line 2)"


def test_an_empty_cell_and_a_stray_comma(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text("id,blurred_query,fused_query\na,查询,意图\nb,,意图二\n", encoding="utf-8")
    assert _one_problem(path, 1) == f"{path}:3: blurred_query: empty string"
    path.write_text("id,blurred_query,fused_query\na,查询,意图\nb,查询,意,图\n", encoding="utf-8")
    assert "4 cells, the header has 3" in _one_problem(path, 1)


def test_a_line_that_is_not_utf8_is_one_line_and_the_others_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    good = "id,blurred_query,fused_query\na,查询,意图\n".encode()
    path.write_bytes(good + "b,查询,意图二\n".encode("gb18030") + "c,查询三,意图三\n".encode())
    line = _one_problem(path, 2)
    assert line.startswith(f"{path}:3: <row>: invalid UTF-8")
    assert [i.id for i in scan_instances_csv(path).instances] == ["a", "c"]
