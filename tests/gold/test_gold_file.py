"""Gold parsed on demand: the same gold and the same errors as cts.gold.load_gold, with flat memory."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from cts.gold import GoldError, load_gold, write_gold
from cts.gold.file import open_gold
from tests.gold.fakes import GOOD


def test_open_gold_equals_load_gold_with_multibyte_text_and_blank_lines(tmp_path: Path) -> None:
    others = [replace(GOOD, instance_id=f"x{i}", must_cover=(f"哪个城市{i}？",)) for i in range(2, 6)]
    path = tmp_path / "gold.jsonl"
    write_gold([GOOD, *others], path)
    path.write_text(path.read_text(encoding="utf-8").replace("\n", "\n\n", 2), encoding="utf-8")
    lazy = open_gold(path)
    assert dict(lazy) == load_gold(path) and len(lazy) == 5 and lazy["x4"].must_cover == ("哪个城市4？",)
    small = lazy.restrict(["x5", "x1"])
    assert list(small) == ["x5", "x1"] and small["x1"] == GOOD and "x2" not in small


def test_open_gold_reports_the_same_problems_as_load_gold(tmp_path: Path) -> None:
    path = tmp_path / "gold.jsonl"
    write_gold([GOOD], path)
    bad = json.loads(path.read_text(encoding="utf-8"))
    bad["nuggets"][0]["weight"] = 7
    path.write_text(path.read_text(encoding="utf-8") + "{oops\n" + json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(GoldError) as lazy:
        open_gold(path)
    with pytest.raises(GoldError) as eager:
        load_gold(path)
    assert lazy.value.problems == eager.value.problems and len(lazy.value.problems) == 3
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(GoldError, match="no gold entries"):
        open_gold(empty)
    with pytest.raises(FileNotFoundError):
        open_gold(tmp_path / "absent.jsonl")


def test_a_gold_file_edited_after_loading_is_refused_on_access(tmp_path: Path) -> None:
    path = tmp_path / "gold.jsonl"
    write_gold([GOOD], path)
    lazy = open_gold(path)
    write_gold([replace(GOOD, must_cover=("另一个问题？",))], path)
    os.utime(path, ns=(1, 1))  # whatever the clock's resolution, the stamp differs
    with pytest.raises(GoldError, match="changed after it was loaded"):
        lazy["x1"]
