"""Static gold: validation, JSONL read/write, build with fake backends, read-only archive."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cts.core.contracts import Extractor, SearchBackend
from cts.core.types import Evidence, Gold, GoldDraft, Instance, Nugget, SearchResult, SpendLimitReached
from cts.gold import (
    GoldArchive,
    GoldError,
    build_gold,
    build_gold_archive,
    load_gold,
    restore_nugget_ids,
    validate_gold,
    write_gold,
)
from tests.gold.fakes import E1, E2, GOOD


def _with_nugget(**changes: Any) -> Gold:
    return replace(GOOD, nuggets=(replace(GOOD.nuggets[0], **changes), GOOD.nuggets[1]))


def test_valid_gold_has_no_problems() -> None:
    assert validate_gold(GOOD) == []
    assert validate_gold(GOOD, {"e1", "e2", "e3"}) == []


@pytest.mark.parametrize(
    ("gold", "archived", "problem"),
    [
        (replace(GOOD, nuggets=()), None, "no nuggets"),
        (_with_nugget(weight=0), None, "nugget 'n1': weight 0 is not an int in 1..3"),
        (_with_nugget(weight=4), None, "nugget 'n1': weight 4 is not an int in 1..3"),
        (_with_nugget(weight=2.0), None, "nugget 'n1': weight 2.0 is not an int in 1..3"),
        (_with_nugget(weight=True), None, "nugget 'n1': weight True is not an int in 1..3"),
        (_with_nugget(text="  "), None, "nugget 'n1': empty text"),
        (_with_nugget(id=""), None, "nugget '': empty id"),
        (_with_nugget(id="n2"), None, "duplicate nugget id 'n2'"),
        (_with_nugget(evidence_ids=()), None, "nugget 'n1': cites no evidence"),
        (
            _with_nugget(evidence_ids=("e9",)),
            None,
            "nugget 'n1': cites evidence id 'e9' not in gold evidence",
        ),
        (GOOD, {"e1"}, "nugget 'n2': cites evidence id 'e2' not in the archived trace"),
        (
            replace(GOOD, evidence=(E1, E2, replace(E2, snippet="other"))),
            None,
            "duplicate evidence id 'e2'",
        ),
        (replace(GOOD, instance_id=" "), None, "instance_id: empty"),
    ],
)
def test_validate_gold_detects(gold: Gold, archived: set[str] | None, problem: str) -> None:
    assert problem in validate_gold(gold, archived)


def test_restore_nugget_ids_renumbers_in_order() -> None:
    raw = [Nugget("x", "a", 1, ["e1"]), Nugget("x", "b", 2), Nugget("", "c", 3)]  # type: ignore[arg-type]
    out = restore_nugget_ids(raw)
    assert [(n.id, n.text) for n in out] == [("n1", "a"), ("n2", "b"), ("n3", "c")]
    assert out[0].evidence_ids == ("e1",)


def test_write_load_round_trip_keeps_chinese(tmp_path: Path) -> None:
    other = replace(GOOD, instance_id="x2", unsupported_claims=("上海是首都。",))
    path = tmp_path / "gold.jsonl"
    write_gold([GOOD, other], path)
    text = path.read_text(encoding="utf-8")
    assert "北京是中华人民共和国的首都" in text and len(text.splitlines()) == 2
    assert set(json.loads(text.splitlines()[0])) == {
        "instance_id",
        "nuggets",
        "evidence",
        "must_cover",
        "missing_evidence",
        "unsupported_claims",
        "provenance",
    }
    assert load_gold(path) == {"x1": GOOD, "x2": other}


def test_write_gold_refuses_invalid_gold_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "gold.jsonl"
    with pytest.raises(GoldError, match="x1: nugget 'n1': weight 5"):
        write_gold([_with_nugget(weight=5)], path)
    with pytest.raises(GoldError, match="duplicate instance id 'x1'"):
        write_gold([GOOD, GOOD], path)
    assert not path.exists()


def test_load_gold_refuses_invalid_file_listing_every_line(tmp_path: Path) -> None:
    path = tmp_path / "gold.jsonl"
    write_gold([GOOD], path)
    good_line = path.read_text(encoding="utf-8")
    bad_weight = json.loads(good_line)
    bad_weight["instance_id"] = "x2"
    bad_weight["nuggets"][0]["weight"] = "3"
    bad_cite = json.loads(good_line)
    bad_cite["instance_id"] = "x3"
    bad_cite["nuggets"][1]["evidence_ids"] = ["e7"]
    lines = [
        good_line.strip(),
        "{oops",
        json.dumps(bad_weight),
        json.dumps(bad_cite),
        good_line.strip(),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(GoldError) as err:
        load_gold(path)
    problems = err.value.problems
    assert problems[0].startswith(f"{path}:2: <row>: Invalid JSON")
    assert problems[1:] == [
        f"{path}:3: nuggets.0.weight: Input should be a valid integer",
        f"{path}:4: nugget 'n2': cites evidence id 'e7' not in gold evidence",
        f"{path}:5: instance_id: duplicate 'x1' (first at line 1)",
    ]


def test_load_gold_refuses_empty_and_missing_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(GoldError, match="no gold entries"):
        load_gold(empty)
    with pytest.raises(FileNotFoundError, match="absent.jsonl"):
        load_gold(tmp_path / "absent.jsonl")


class FakeSearch:
    """Scripted search backend: evidence per query; raises for queries containing 'boom'."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def search(self, query: str) -> SearchResult:
        self.calls.append(query)
        await asyncio.sleep(0)
        if "boom" in query:
            raise RuntimeError("backend down")
        if "spend" in query:
            raise SpendLimitReached("cap")
        return SearchResult(
            answer=f"Answer to {query}.",
            answer_rule="answer_tag",
            evidence=(E1, E2, Evidence("e3", "local://3", "unused", "Never cited.")),
            trace=({"tool": "search", "args": {"query": query}},),
            summary={"calls": 1},
        )


class FakeExtractor:
    """Cites e2 then e1 (to check evidence order); bad weight for queries containing 'heavy'."""

    async def extract(self, fused_query: str, answer: str, evidence: Sequence[Evidence]) -> GoldDraft:
        weight = 9 if "heavy" in fused_query else 2
        nuggets = (
            Nugget("dup", f"About {fused_query}.", weight, ("e2",)),
            Nugget("dup", "北京是首都。", 3, ("e1",)),
        )
        return GoldDraft(nuggets=nuggets, must_cover=(fused_query,), unsupported_claims=("x",))


def _instances() -> list[Instance]:
    return [
        Instance("i1", "capital", "capital of China"),
        Instance("i2", "crash", "boom query"),
        Instance("i3", "weights", "heavy query"),
        Instance("i4", "capital again", "capital of China"),
    ]


def test_fakes_implement_the_protocols() -> None:
    assert isinstance(FakeSearch(), SearchBackend) and isinstance(FakeExtractor(), Extractor)


def test_build_gold_reports_failures_and_assembles_valid_gold() -> None:
    search = FakeSearch()
    golds, failures = asyncio.run(
        build_gold(_instances(), search, FakeExtractor(), provenance={"backend": "fake"}, concurrency=2)
    )
    assert [g.instance_id for g in golds] == ["i1", "i4"]
    assert dict(failures) == {
        "i2": "search failed: RuntimeError: backend down",
        "i3": "invalid gold: nugget 'n1': weight 9 is not an int in 1..3",
    }
    assert sorted(search.calls) == [
        "boom query",
        "capital of China",
        "heavy query",
    ]  # one search per q*
    g = golds[0]
    assert [n.id for n in g.nuggets] == ["n1", "n2"]
    assert [e.id for e in g.evidence] == ["e1", "e2"]  # cited subset, in search order
    assert g.must_cover == ("capital of China",) and g.unsupported_claims == ("x",)
    assert g.provenance["backend"] == "fake"
    assert {k: g.provenance[k] for k in ("answer", "answer_rule", "end_reason", "n_evidence", "fused_query")} == {
        "answer": "Answer to capital of China.",
        "answer_rule": "answer_tag",
        "end_reason": "answer",
        "n_evidence": 3,
        "fused_query": "capital of China",
    }
    assert g.provenance["date"][:2] == "20"


def test_build_gold_stops_on_the_spend_limit_and_rejects_duplicate_ids() -> None:
    with pytest.raises(SpendLimitReached):
        asyncio.run(build_gold([Instance("b", "q", "spend")], FakeSearch(), FakeExtractor(), provenance={}))
    dup = [Instance("a", "q", "x"), Instance("a", "q", "y")]
    with pytest.raises(ValueError, match="duplicate instance id 'a'"):
        asyncio.run(build_gold(dup, FakeSearch(), FakeExtractor(), provenance={}))


def test_archive_is_complete_read_only_and_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "gold_v1"
    report = asyncio.run(
        build_gold_archive(_instances(), FakeSearch(), FakeExtractor(), GoldArchive(out, {"backend": "fake"}))
    )
    assert (report.n_instances, report.n_gold) == (4, 2)
    assert [i for i, _ in report.failures] == ["i2", "i3"]
    assert sorted(load_gold(out / "gold.jsonl")) == ["i1", "i4"]
    runs = [json.loads(x) for x in (out / "gold_runs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in runs] == ["i1", "i3", "i4"]  # i2 never got a search result
    assert len(runs[0]["evidence"]) == 3 and runs[0]["trace"][0]["tool"] == "search"
    failures = [json.loads(x) for x in (out / "failures.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [f["id"] for f in failures] == ["i2", "i3"]
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["counts"] == {"instances": 4, "gold": 2, "failures": 2, "fused_queries": 3}
    assert manifest["sha256"]["gold.jsonl"] == report.gold_sha256
    assert manifest["provenance"] == {"backend": "fake"}
    for f in ("gold.jsonl", "gold_runs.jsonl", "failures.jsonl", "manifest.json"):
        assert stat.S_IMODE((out / f).stat().st_mode) == 0o444
    with pytest.raises(FileExistsError, match="gold archive exists"):
        asyncio.run(build_gold_archive(_instances(), FakeSearch(), FakeExtractor(), GoldArchive(out, {})))
    again = asyncio.run(
        build_gold_archive(_instances()[:1], FakeSearch(), FakeExtractor(), GoldArchive(out, {}, overwrite=True))
    )
    assert again.n_gold == 1 and list(load_gold(out / "gold.jsonl")) == ["i1"]


def test_archive_refuses_before_searching(tmp_path: Path) -> None:
    (tmp_path / "gold.jsonl").write_text("", encoding="utf-8")
    search = FakeSearch()
    with pytest.raises(FileExistsError):
        asyncio.run(build_gold_archive(_instances(), search, FakeExtractor(), GoldArchive(tmp_path, {})))
    assert search.calls == []


def test_load_gold_refuses_archived_gold_edited_afterwards(tmp_path: Path) -> None:
    out = tmp_path / "arch"
    asyncio.run(build_gold_archive(_instances()[:1], FakeSearch(), FakeExtractor(), GoldArchive(out, {})))
    path = out / "gold.jsonl"
    path.chmod(0o644)
    path.write_text(path.read_text(encoding="utf-8").replace("About", "Around"), encoding="utf-8")
    with pytest.raises(GoldError, match="sha256 differs"):
        load_gold(path)
