"""Compatibility at the edge: only cts/compat/ knows what older versions wrote, and it upgrades it to today's form."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from cts.compat.config import old_model_id_key, structured_output_mode, upgrade_llm_settings
from cts.compat.job_dirs import OLD_STOP_REASONS, factors_from_run_name, stop_reason, timed_trace_line
from cts.compat.records import (
    OLD_CLARIFIED_KEY,
    OLD_END_REASONS,
    infra_as_written_before,
    question_types,
    upgrade_record,
)
from cts.compat.renames import RENAMES, read_renames
from cts.core.records import Record
from tests.layers import PKG

COMPAT = PKG / "compat"
OUTSIDE = sorted(p for p in PKG.rglob("*.py") if COMPAT not in p.parents)

LEGACY_NAME = re.compile(r"(?i)legacy|^_?old_")
"""A name a module would define to hold an older format (``_legacy_factors``, ``OLD_END_REASONS``)."""


def _markers() -> set[str]:
    """Values only an older format holds: old end and stop reasons, retired dotted keys, options, ``_target_`` paths."""
    retired = {r.old for r in RENAMES if "." in r.old or "=" in r.old}
    return {*OLD_END_REASONS, *OLD_STOP_REASONS, *retired}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            found.add(id(body[0].value))
        if isinstance(body, list):  # attribute docstrings: a string after an assignment
            found |= {id(b.value) for b in body if isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)}
    return found


def _older_format_readers(source: str, where: str, markers: set[str]) -> list[str]:
    """Where ``source`` defines a legacy name or holds a value of an older format (docstrings aside)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        defined = [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined += [t.id for t in targets if isinstance(t, ast.Name)]
        found += [f"{where}:{node.lineno}: defines {name}" for name in defined if LEGACY_NAME.search(name)]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            value = node.value
            if value in markers or any(value.startswith(f"{m}.") for m in markers if m.startswith("cts.")):
                found.append(f"{where}:{node.lineno}: {value!r} is a name of an older format")
    return found


def test_no_module_outside_the_compat_package_reads_an_older_format() -> None:
    markers = _markers()
    found = [
        line
        for path in OUTSIDE
        for line in _older_format_readers(path.read_text(encoding="utf-8"), str(path.relative_to(PKG.parent)), markers)
    ]
    assert not found, "move these into cts/compat/ (upgrade what is read to today's form):\n" + "\n".join(found)


def test_the_check_finds_a_reader_of_an_older_format() -> None:
    source = (
        'def _legacy_factors(x):\n    return {"call_budget": "call_limit"}.get(x)\n'
        'OLD_STOPS = {"budget": "spend_limit"}\n'
        'TARGET = "cts.judge.LexicalJudge"\n'
        'def f():\n    """Docstrings may say call_budget."""\n    return "call_limit"\n'
    )
    found = _older_format_readers(source, "m.py", _markers())
    assert sorted(found) == [
        "m.py:1: defines _legacy_factors",
        "m.py:2: 'call_budget' is a name of an older format",
        "m.py:3: 'budget' is a name of an older format",
        "m.py:3: defines OLD_STOPS",
        "m.py:4: 'cts.judge.LexicalJudge' is a name of an older format",
    ]


def test_the_table_is_data_one_row_per_retired_name(tmp_path: Path) -> None:
    assert len(RENAMES) == len({(r.old, r.on) for r in RENAMES}) == 59
    table = tmp_path / "renames.tsv"
    table.write_text(
        "# a comment\nold\tnew\ton\tscope\twhat\na.b\tc.d\t2027-01-01\tprotocol\tthe x\n", encoding="utf-8"
    )
    (row,) = read_renames(table)
    assert (row.old, row.new, row.on, row.what, row.protocol, row.target, row.group) == (
        "a.b",
        "c.d",
        "2027-01-01",
        "the x",
        True,
        False,
        None,
    )


# The upgrades: an older line in, today's form out; a line of today passes through as it is.

TODAY = {"id": "a", "k": 1, "clarified": {"query": "q", "end_reason": "call_limit"}, "orig": None}


def test_a_record_of_today_is_returned_as_it_is() -> None:
    assert upgrade_record(TODAY) is TODAY


def test_an_older_record_reads_as_today_s() -> None:
    arm = {"query": "查询", "end_reason": "call_budget", "trace_summary": {"end_reason": "context_budget", "calls": 3}}
    old = {"id": "a", "k": 1, OLD_CLARIFIED_KEY: arm, "arms": {"oracle": {"query": "q", "end_reason": "call_budget"}}}
    new = upgrade_record(old)
    assert OLD_CLARIFIED_KEY not in new and old[OLD_CLARIFIED_KEY] is arm  # the line read is left alone
    assert new["clarified"] == {
        **arm,
        "end_reason": "call_limit",
        "trace_summary": {"end_reason": "context_limit", "calls": 3},
    }
    assert new["arms"]["oracle"]["end_reason"] == "call_limit"
    record = Record.from_dict(old)
    assert record.clarified is not None and record.clarified.query == "查询"
    assert record.clarified.end_reason == "call_limit" and record.arms["oracle"].end_reason == "call_limit"


@pytest.mark.parametrize(
    ("kind", "message", "infra"),
    [
        ("api_error", "timeout: read timed out", True),
        ("api_error", "search ended in error", True),
        ("exception", "OperationalError: database is locked", True),
        ("api_error", "client_error: 418", False),
        ("invalid_output", "timeout: no", False),
    ],
)
def test_infrastructure_failures_older_versions_committed(kind: str, message: str, infra: bool) -> None:
    assert infra_as_written_before(kind, message) is infra


def test_summaries_traces_and_settings_of_older_versions() -> None:
    assert stop_reason("budget") == "spend_limit" and stop_reason("done") == "done"
    assert factors_from_run_name("k=1,clarifier=rules,x,+tag=中文") == {"k": "1", "clarifier": "rules,x", "tag": "中文"}
    line = {"arm": "instance", "start_ns": 5, "end_ns": 9}
    assert timed_trace_line(line, 1.0) is line
    old = timed_trace_line({"arm": "instance"}, 2.0)
    assert old["end_ns"] - old["start_ns"] == 2_000_000_000
    assert upgrade_llm_settings({"budget": {"max_usd": 3}}) == {"spend": {"max_usd": 3}}
    assert upgrade_llm_settings({"spend": {"max_usd": 1}, "budget": {"max_usd": 3}}) == {"spend": {"max_usd": 1}}
    assert structured_output_mode(True) == "json_schema" and structured_output_mode(False) == "none"
    assert structured_output_mode("tool") == "tool"
    assert old_model_id_key({"name": "m", "id": "x"}) is None
    assert "write `id: x/y`" in str(old_model_id_key({"name": "m", "model": "x/y"}))


def test_the_guide_states_the_policy_and_today_s_table_size() -> None:
    guide = (PKG.parent / "docs" / "reference.md").read_text(encoding="utf-8")
    section = guide.split("\n## Compatibility\n", 1)[1]
    assert "**Before 1.0, no aliases.**" in section and "name the release that removes them" in section
    assert f"It holds {len(RENAMES)} rows today." in section


def test_questions_of_records_without_types_are_typed_by_the_classifier() -> None:
    typed = question_types(["在哪里？", "when?"], [("region",)], lambda q: ("time",))
    assert typed == [("region",), ("time",)]
