"""The stage declaration (:mod:`cts.core.stages`): every stage keeps its contract, and no list is written twice."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from cts.core.stages import (
    ANSWER,
    JUDGE,
    SEARCH,
    Stage,
    accounting_roles,
    model_role_nodes,
    register,
    registered,
    resampled_roles,
    stages,
)
from tests.stage_contract import contract_problems

REPO = Path(__file__).resolve().parents[2]
DECLARATION = REPO / "cts" / "core" / "stages.py"
ALLOWED: dict[str, int] = {}
"""Files still allowed to write stage or role names out as a list, with how many (a shrinking allowlist: empty)."""


@pytest.mark.parametrize("stage", stages(), ids=lambda s: s.name)
def test_every_stage_keeps_its_contract(stage: Stage) -> None:
    assert contract_problems(stage) == []


def test_a_broken_stage_is_caught() -> None:
    wrong = Stage("ask", "asker", "cts.core.contracts.Rewriter", "rewrite", ("query",), "q", "rewriter", ("query",))
    problems = contract_problems(wrong)
    assert any("does not take exactly" in p for p in problems)
    assert any("prompts/rewriter.md has" in p for p in problems)
    assert any("unscored_rate_asker" in p for p in problems)


def test_only_the_user_answerer_sees_the_intent_and_only_the_judge_the_gold() -> None:
    assert [s.name for s in stages() if "fused_query" in s.sees] == [ANSWER.name]
    assert [s.name for s in stages() if "nuggets" in s.sees] == [JUDGE.name]
    assert [s.name for s in stages() if s.on_arm] == [SEARCH.name, JUDGE.name]


def test_names_and_spans_are_unique() -> None:
    for attr in ("name", "role", "span"):
        values = [getattr(s, attr) for s in stages()]
        assert len(set(values)) == len(values), attr
    assert len(set(accounting_roles())) == len(accounting_roles())


def test_a_new_stage_refines_the_query_and_is_gone_after_its_block() -> None:
    new = Stage("expand", "expander", "builtins.object", "expand", ("query",), "query")
    with registered(new):
        assert [s.name for s in stages()][-3:] == ["expand", SEARCH.name, JUDGE.name]
        assert "expander" in resampled_roles()
        with pytest.raises(ValueError, match="declared already"):
            register(new)
    assert new not in stages()
    with pytest.raises(ValueError, match="refines the clarified query"):
        register(Stage("peek", "peeker", "builtins.object", "peek", ("fused_query",), "query"))


def test_the_role_timeouts_name_declared_roles() -> None:
    conf = yaml.safe_load((REPO / "conf" / "llm" / "default.yaml").read_text(encoding="utf-8"))
    assert set(conf["role_timeout_s"]) <= set(accounting_roles())
    assert set(conf["role_timeout_s"]) >= {s.role for s in stages()}


def test_the_model_roles_plugin_reads_the_declaration() -> None:
    from hydra_plugins.cts_model_roles.cts_model_roles import role_node

    for group, node in model_role_nodes().items():
        assert {k: v for k, v in role_node(group, "m").items() if k != "defaults"} == dict(node)


def name_lists(path: Path, names: set[str]) -> list[int]:
    """The line of each tuple, list, set, dict or call of ``path`` with >= 2 literal stage or role names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Call):
            items = list(node.args)
        else:
            continue
        if sum(isinstance(e, ast.Constant) and e.value in names for e in items) >= 2:
            found.append(node.lineno)
    return found


def test_no_list_of_stage_or_role_names_outside_the_declaration() -> None:
    names = {s.name for s in stages()} | set(accounting_roles())
    files = [p for d in ("cts", "hydra_plugins") for p in sorted((REPO / d).rglob("*.py")) if p != DECLARATION]
    found = [f"{p.relative_to(REPO)}:{line}" for p in files for line in name_lists(p, names)]
    by_file = {str(p.relative_to(REPO)): len(name_lists(p, names)) for p in files if name_lists(p, names)}
    assert by_file == ALLOWED, "write these from cts.core.stages instead:\n" + "\n".join(found)


def test_the_scan_finds_a_list(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text('ROLES = ("clarifier", "ua")\nok = ("clarifier",)\nf("search", "judge")\n', encoding="utf-8")
    assert name_lists(path, {"clarifier", "ua", "search", "judge"}) == [1, 3]


def test_a_declared_llm_stage_gets_a_role_group_per_model(tmp_path: Path) -> None:
    from hydra_plugins.cts_model_roles.cts_model_roles import register as register_models

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "m.yaml").write_text("id: openai/m\n", encoding="utf-8")
    stored: list[tuple[str, str]] = []

    class Store:
        def store(self, group: str, name: str, node: object, provider: str) -> None:
            stored.append((group, name))

    node = {"_target_": "cts.roles.llm.LLMRewriter", "prompt": "rewriter", "max_output_tokens": 64}
    with registered(Stage("expand", "expander", "builtins.object", "expand", ("query",), "query", node=node)):
        register_models([tmp_path], Store())  # type: ignore[arg-type]
    assert ("expander", "m") in stored and ("clarifier", "m") in stored
