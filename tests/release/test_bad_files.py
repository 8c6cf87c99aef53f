"""Each bad file the issue lists, in a release dir: ``inspect`` gives its one ``error:`` line and counts every good row."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from cts.release.cli import main
from tests.release.fixture import write_release

GOLD = "data/gold_public_hard518.jsonl"
QUERIES = "data/hard_518_queries.csv"
CAND = "results/candidates/ebk1__cand_hard518.jsonl"
CLARIFY = "results/clarify_only/gpk2__clarify_hard518.jsonl"


def _edit_jsonl(path: Path, line: int, edit: Callable[[dict], None]) -> None:
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    edit(rows[line - 1])
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _no_utf8(path: Path, line: int) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_bytes(
        b"".join((x.encode("gb18030") if i == line else x.encode()) + b"\n" for i, x in enumerate(lines, 1))
    )


def _missing_column(root: Path) -> None:
    path = root / QUERIES
    path.write_text(path.read_text(encoding="utf-8-sig").replace("blurred_query", "bq", 1), encoding="utf-8")


def _duplicate_id(root: Path) -> None:
    path = root / QUERIES
    path.write_text(path.read_text(encoding="utf-8-sig").replace("q3,", "q1,", 1), encoding="utf-8")


CASES: dict[str, tuple[Callable[[Path], None], str, str, str]] = {
    # case: (spoil the release, the file, the line and message of the error, the file's count line)
    "missing column": (_missing_column, QUERIES, "1: blurred_query: no such column", "4 rows (0 good)"),
    "duplicate ids": (_duplicate_id, QUERIES, "4: id: duplicate id 'q1' (first at line 2)", "4 rows (3 good)"),
    "nugget without a weight": (
        lambda r: _edit_jsonl(r / GOLD, 2, lambda g: g["nuggets"][1].pop("weight")),
        GOLD,
        "2: nugget 2: weight: missing",
        "4 records (3 good)",
    ),
    "weight 4": (
        lambda r: _edit_jsonl(r / GOLD, 3, lambda g: g["nuggets"][0].update(weight=4)),
        GOLD,
        "3: nugget 1: weight: 4 is not an integer in 1..3",
        "4 records (3 good)",
    ),
    "evidence id pointing nowhere": (
        lambda r: _edit_jsonl(r / GOLD, 1, lambda g: g["nuggets"][0].update(evidence_ids=["e404"])),
        GOLD,
        "1: nugget 'n1': cites evidence id 'e404' not in gold evidence",
        "4 records (3 good)",
    ),
    "candidate id not in the gold": (
        lambda r: _edit_jsonl(r / CAND, 4, lambda c: c.update(id="q9")),
        CAND,
        "4: id 'q9' is not in the gold",
        "4 records (4 good)",
    ),
    "non-UTF-8 line": (lambda r: _no_utf8(r / CLARIFY, 2), CLARIFY, "2: invalid UTF-8", "4 records (3 good)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_error_line_per_bad_file_and_no_good_row_lost(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    release = write_release(tmp_path / "release")
    spoil, name, error, count = CASES[case]
    spoil(release)
    assert main(["inspect", str(release)]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {release / name}:{error}"), lines
    assert f"{release / name}: " in out and count in out.split(f"{release / name}: ", 1)[1].splitlines()[0]
    assert out.rstrip().endswith("1 problem(s)")
