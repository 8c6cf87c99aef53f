"""Records of older versions load under today's names."""

from __future__ import annotations

import json
from pathlib import Path

from cts.compat.records import OLD_END_REASONS
from cts.core.records import ArmResult, Record, read_records


def test_the_search_end_reasons_of_older_records_load_renamed(tmp_path: Path) -> None:
    def arm(reason: str) -> ArmResult:
        return ArmResult("q", "Paris", "answer_tag", reason, {"llm_calls": 3, "end_reason": reason}, score=50.0)

    new = Record("a", 1, clarified=arm("call_limit"), orig=arm("context_limit"), arms={"oracle": arm("answer")})
    line = json.loads(new.to_json())
    for part in (line["clarified"], line["orig"]):  # as written before the rename
        part["end_reason"] = part["trace_summary"]["end_reason"] = {v: k for k, v in OLD_END_REASONS.items()}[
            part["end_reason"]
        ]
    assert line["clarified"]["end_reason"] == "call_budget" and line["orig"]["trace_summary"]["end_reason"] == (
        "context_budget"
    )
    (tmp_path / "records.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    (loaded,) = read_records(tmp_path / "records.jsonl")
    assert loaded == new
    assert loaded.orig is not None and loaded.orig.trace_summary["end_reason"] == "context_limit"
