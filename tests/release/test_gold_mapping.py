"""The release's gold read through the declared mapping: defaults, alternatives, one line per bad record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cts.data.release import load_release_dataset, read_mapped_gold
from cts.gold import GoldError
from cts.gold.mapping import GOLD_NAMES, GoldLayoutError, scan_mapped_gold
from tests.release.fixture import NUGGETS, PAIRS, gold_record, jsonl, write_release


def _records() -> list[dict[str, Any]]:
    return [gold_record(i) for i, _, _ in PAIRS]


def test_the_default_layout_is_read_as_cts_gold(tmp_path: Path) -> None:
    scan = scan_mapped_gold(jsonl(tmp_path / "g.jsonl", _records()))
    assert not scan.problems and [g.instance_id for g in scan.golds] == ["q1", "q2", "q3", "q4"]
    q1 = scan.golds[0]
    assert [(n.id, n.text, n.weight, n.evidence_ids) for n in q1.nuggets] == [
        ("n1", NUGGETS["q1"][0][0], 3, ("q1-e1",)),
        ("n2", NUGGETS["q1"][1][0], 1, ("q1-e2",)),
    ]
    assert [e.id for e in q1.evidence] == ["q1-e1", "q1-e2"] and q1.evidence[0].source == "https://example.org/q1/1"
    assert q1.must_cover == ("子问题",)
    assert {k: v for k, v in scan.names.items() if v} == {
        "id": "id",
        "query": "fused_query",
        "nuggets": "nuggets",
        "evidence": "evidence",
        "must_cover": "must_cover",
        "missing_evidence": "missing_evidence",
        "unsupported_claims": "unsupported_claims",
        "text": "text",
        "weight": "weight",
        "evidence_ids": "evidence_ids",
        "evidence_key": "id",
        "snippet": "snippet",
        "title": "title",
        "source": "url",
    }


def _renamed(record: dict[str, Any]) -> dict[str, Any]:
    nuggets = [
        {"nugget_id": f"g{j}", "statement": n["text"], "importance": n["weight"], "source_ids": n["evidence_ids"]}
        for j, n in enumerate(record["nuggets"])
    ]
    pool = [{"source_id": e["id"], "content": e["snippet"]} for e in record["evidence"]]
    return {"qid": record["id"], "gold_nuggets": nuggets, "evidence_pool": pool}


def test_alternative_names_are_tried_in_order(tmp_path: Path) -> None:
    scan = scan_mapped_gold(jsonl(tmp_path / "g.jsonl", [_renamed(r) for r in _records()]))
    assert not scan.problems and len(scan.golds) == 4
    used = {
        k: scan.names[k]
        for k in ("id", "nuggets", "text", "weight", "evidence_ids", "nugget_id", "evidence", "evidence_key", "snippet")
    }
    assert used == {
        "id": "qid",
        "nuggets": "gold_nuggets",
        "text": "statement",
        "weight": "importance",
        "evidence_ids": "source_ids",
        "nugget_id": "nugget_id",
        "evidence": "evidence_pool",
        "evidence_key": "source_id",
        "snippet": "content",
    }
    assert scan.golds[0].nuggets[0].id == "g0"  # the file's own nugget ids are kept


def test_a_declared_mapping_wins(tmp_path: Path) -> None:
    rows = [{("要点" if k == "nuggets" else k): v for k, v in r.items()} for r in _records()]
    with pytest.raises(GoldLayoutError):
        scan_mapped_gold(jsonl(tmp_path / "g.jsonl", rows))
    assert len(scan_mapped_gold(tmp_path / "g.jsonl", {"nuggets": "要点"}).golds) == 4
    with pytest.raises(GoldError, match="unknown key"):
        scan_mapped_gold(tmp_path / "g.jsonl", {"nuggetz": "要点"})


def test_a_file_that_fits_no_layout_is_one_line(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "g.jsonl", [{"qid": "q1", "facts": [{"fact": "x", "w": 1}]}])
    with pytest.raises(GoldLayoutError) as e:
        scan_mapped_gold(path)
    (line,) = e.value.problems
    assert line.startswith(f"{path}:1: the gold fits no name of 'nuggets'")
    assert "['facts', 'qid']" in line and "set dataset.gold_fields.nuggets=" in line
    assert all(n in line for n in GOLD_NAMES["nuggets"])


def test_records_without_ids_are_matched_by_their_intent_query(tmp_path: Path) -> None:
    write_release(tmp_path / "release", with_id=False)
    dataset = load_release_dataset(str(tmp_path / "release"))
    assert len(dataset.instances) == 4
    for inst in dataset.instances:
        assert dataset.gold[inst.id].instance_id == inst.id  # keyed by the derived id
        assert (
            dataset.gold[inst.id]
            .nuggets[0]
            .evidence_ids[0]
            .startswith(f"{dict((f, i) for i, _, f in PAIRS)[inst.fused_query]}-")
        )


BAD: dict[str, Any] = {
    "no_weight": (lambda r: r["nuggets"][0].pop("weight"), "nugget 1: weight: missing"),
    "weight_4": (lambda r: r["nuggets"][0].update(weight=4), "nugget 1: weight: 4 is not an integer in 1..3"),
    "dangling_evidence": (
        lambda r: r["nuggets"][1].update(evidence_ids=["nowhere"]),
        "cites evidence id 'nowhere' not in gold evidence",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_bad_record_is_one_line_and_no_good_record_is_lost(tmp_path: Path, case: str) -> None:
    records = _records()
    spoil, message = BAD[case]
    spoil(records[2])
    path = jsonl(tmp_path / "g.jsonl", records)
    scan = scan_mapped_gold(path)
    assert [g.instance_id for g in scan.golds] == ["q1", "q2", "q4"]
    (line,) = scan.problems
    assert line.startswith(f"{path}:3: ") and message in line, line
    with pytest.raises(GoldError) as e:
        read_mapped_gold(path, [])
    assert e.value.problems == [line]


def test_a_duplicate_id_and_a_non_utf8_line(tmp_path: Path) -> None:
    records = _records()
    records[3]["id"] = "q1"
    scan = scan_mapped_gold(jsonl(tmp_path / "g.jsonl", records))
    assert [g.instance_id for g in scan.golds] == ["q1", "q2", "q3"]
    assert scan.problems == (f"{tmp_path / 'g.jsonl'}:4: duplicate 'q1' (first at line 1)",)
    path = tmp_path / "h.jsonl"
    lines = [
        json.dumps(r, ensure_ascii=False).encode("gb18030" if i == 1 else "utf-8") for i, r in enumerate(_records())
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    scan = scan_mapped_gold(path)
    assert [g.instance_id for g in scan.golds] == ["q1", "q3", "q4"]
    (line,) = scan.problems
    assert line.startswith(f"{path}:2: invalid UTF-8")


def test_a_layout_without_evidence_ids_is_read_but_one_missing_nugget_citation_is_a_problem(tmp_path: Path) -> None:
    bare = [
        {"id": r["id"], "nuggets": [{"text": n["text"], "weight": n["weight"]} for n in r["nuggets"]]}
        for r in _records()
    ]
    scan = scan_mapped_gold(jsonl(tmp_path / "g.jsonl", bare))
    assert not scan.problems and len(scan.golds) == 4 and scan.names["evidence_ids"] is None
    records = _records()
    records[1]["nuggets"][1]["evidence_ids"] = []
    scan = scan_mapped_gold(jsonl(tmp_path / "h.jsonl", records))
    assert scan.problems == (f"{tmp_path / 'h.jsonl'}:2: nugget 'n2': cites no evidence",)
    assert [g.instance_id for g in scan.golds] == ["q1", "q3", "q4"]
