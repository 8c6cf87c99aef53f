"""A job's values reach the code as one frozen object per concern: no public function takes more than 6 parameters.

Public: a function or method whose name and class do not start with ``_`` (``__init__`` of a
public class counts), in ``cts/`` and ``hydra_plugins/``. ``self`` and ``cls`` do not count;
``*args`` and ``**kwargs`` count one each.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_PARAMETERS = 6
THREADED: set[str] = set()
"""The pipeline's parameter threading: gone (its settings are :mod:`cts.protocol.settings`); stays empty."""
NOT_YET: set[str] = set()
"""Functions allowed over the limit: none. A component takes its keys as one ``settings`` dataclass (the
config keeps them flat, :func:`cts.compose.services.component_arguments` binds them); a task's composer
builds its settings objects. The list may only shrink (a name that fits is refused here)."""


def counted(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return len([n for n in names if n not in ("self", "cls")]) + (a.vararg is not None) + (a.kwarg is not None)


def public_functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield from public_functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            dunder = node.name.startswith("__") and node.name.endswith("__")
            if dunder or not node.name.startswith("_"):
                yield f"{prefix}{node.name}", counted(node)


def arities() -> dict[str, int]:
    files = [p for root in ("cts", "hydra_plugins") for p in sorted((REPO / root).rglob("*.py"))]
    return {
        f"{p.relative_to(REPO).as_posix()}:{name}": n
        for p in files
        for name, n in public_functions(ast.parse(p.read_text(encoding="utf-8")))
    }


def test_no_public_function_takes_more_than_6_parameters() -> None:
    over = {name: n for name, n in arities().items() if n > MAX_PARAMETERS}
    assert sorted(set(over) - THREADED - NOT_YET) == [], "take the settings as one frozen object"
    assert sorted(NOT_YET - set(over)) == [], "now within the limit: take it off NOT_YET"


def test_the_count_sees_methods_keyword_only_and_star_parameters() -> None:
    tree = ast.parse(
        "class A:\n def __init__(self, a, *, b, **c): ...\n def _p(self, a, b, c, d, e, f, g): ...\n"
        "class _B:\n def m(self, a, b, c, d, e, f, g): ...\n"
        "def f(a, /, b, *c, d): ...\n"
    )
    assert dict(public_functions(tree)) == {"A.__init__": 3, "f": 4}


def test_a_component_takes_its_flat_keys_as_one_settings_object_and_a_typo_is_still_refused() -> None:
    from hydra import compose, initialize_config_dir

    from cts.compose.checks import unknown_key_problems
    from cts.compose.services import settings_parameter
    from cts.search.webdancer import AgentSettings, WebDancerSearch

    assert settings_parameter(WebDancerSearch) == ("settings", AgentSettings)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["search.max_llm_calls=3", "+search.max_llm_callz=3"])
    problems = unknown_key_problems(cfg)
    assert [p.split(":")[0] for p in problems] == ["search.max_llm_callz"]
    assert "max_llm_calls" in problems[0] and "settings," not in problems[0]  # the keys it takes, flat


def test_the_builder_binds_the_flat_keys_into_the_settings_object() -> None:
    from cts.compose.services import component_arguments
    from cts.search.providers import HttpPolicy, SerperProvider

    keys = {"base_url": "http://127.0.0.1:1/search", "gl": "cn", "timeout_s": 2.0, "max_attempts": 5}
    args = component_arguments(SerperProvider, keys, None)  # type: ignore[arg-type]  # no resources asked
    assert args == {"base_url": keys["base_url"], "gl": "cn", "settings": HttpPolicy(timeout_s=2.0, max_attempts=5)}
    assert SerperProvider(**args).http == HttpPolicy(2.0, 5, 1.0)


def test_every_dataset_option_s_keys_are_still_accepted_and_bound() -> None:
    from hydra import compose, initialize_config_dir

    from cts.compose.checks import unknown_key_problems
    from cts.compose.services import component_arguments
    from cts.data.release import MappedReading, load_release_dataset

    for option in ("hard518", "csv", "jsonl"):
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=[f"dataset={option}", "dataset.only_with_gold=true"])
        assert unknown_key_problems(cfg.dataset, "dataset") == [], option
    keys = {"release": "r", "name": "hard518", "only_with_gold": True, "gold_fields": {"nuggets": "n"}}
    args = component_arguments(load_release_dataset, keys, None)  # type: ignore[arg-type]  # no resources asked
    assert args["settings"] == MappedReading(only_with_gold=True, gold_fields={"nuggets": "n"})


def test_an_llm_role_binds_its_flat_keys_and_the_job_s_max_reasks_into_one_role_settings() -> None:
    from types import SimpleNamespace

    from hydra import compose, initialize_config_dir

    from cts.compose.checks import unknown_key_problems
    from cts.compose.services import component_arguments, settings_parameter
    from cts.roles.gates import LLMGate
    from cts.roles.llm import LLMClarifier, LLMUserAnswerer, RoleSettings

    for role in (LLMClarifier, LLMUserAnswerer, LLMGate):
        assert settings_parameter(role) == ("settings", RoleSettings), role
    services = SimpleNamespace(llm=SimpleNamespace(settings=SimpleNamespace(max_reasks=5)))
    keys = {"prompt": "clarifier", "mode": "batch", "max_output_tokens": 64, "structured": False}
    args = component_arguments(LLMClarifier, keys, services)  # type: ignore[arg-type]  # only max_reasks is asked
    assert args == {
        "prompt": "clarifier",
        "mode": "batch",
        "settings": RoleSettings(max_reasks=5, max_output_tokens=64, structured=False),
    }
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["clarifier=gpt", "+clarifier.max_reasks=1", "+clarifier.max_reaskz=1"])
    assert [p.split(":")[0] for p in unknown_key_problems(cfg)] == ["clarifier.max_reaskz"]
