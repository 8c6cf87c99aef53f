"""The seams between composition and the rest: components and tasks get plain, typed arguments.

Only the composition layer (``cts/compose/app.py``) and its resource factories (``cts/compose/services.py``)
see the job's :class:`cts.compose.services.Services`; every role, search backend, dataset loader and
task receives exactly what it uses (a chat client, the index, the corpus, typed settings).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cts.compose.app import build_node, preflight_problems_of, task_groups
from cts.compose.services import Services, component_arguments, resource_parameters
from tests.llm_server import llm_settings

REPO = Path(__file__).resolve().parents[2]
PKG, CONF = REPO / "cts", REPO / "conf"
COMPOSITION = {PKG / "compose" / "app.py", PKG / "compose" / "services.py"}


def _functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    return [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]


def test_nothing_outside_composition_takes_the_job_services() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{fn.lineno} {fn.name}({arg.arg})"
        for path in sorted(PKG.rglob("*.py"))
        if path not in COMPOSITION
        for fn in _functions(path)
        for arg in _parameters(fn)
        if arg.arg == "services" or (arg.annotation is not None and "Services" in ast.unparse(arg.annotation))
    ]
    assert not offenders, "\n".join(offenders)


def test_the_scan_sees_a_services_parameter(tmp_path: Path) -> None:
    """The scan above would catch one (a test that cannot fail proves nothing)."""
    module = tmp_path / "m.py"
    module.write_text("class A:\n    def __init__(self, services) -> None: ...\n")
    assert [a.arg for fn in _functions(module) for a in _parameters(fn)] == ["self", "services"]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return found


def test_components_and_tasks_do_not_import_the_services_module() -> None:
    from tests.layers import LAYERS, layer_of, module_name

    composition = [name for name, _ in LAYERS].index("composition")
    offenders = [
        module_name(p)
        for p in sorted(PKG.rglob("*.py"))
        if p not in COMPOSITION and layer_of(module_name(p)) < composition and "cts.compose.services" in _imports(p)
    ]
    assert not offenders


TASKS = (
    "evaluate.evaluate_task",
    "build_gold.build_gold_task",
    "judge_robustness.judge_robustness_task",
    "backbone_stability.backbone_stability_task",
    "judge_probes.judge_probes_task",
    "score_answers.score_answers_task",
)


@pytest.mark.parametrize("name", TASKS)
def test_every_task_takes_typed_keyword_arguments_not_the_config(name: str) -> None:
    from hydra.utils import get_object

    params = inspect.signature(get_object(f"cts.tasks.{name}")).parameters
    assert params and all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert all(p.annotation is not inspect.Parameter.empty for p in params.values())
    assert not {"cfg", "config", "services", "build"} & set(params)
    assert not any("DictConfig" in str(p.annotation) or str(p.annotation) == "Any" for p in params.values())


def test_every_configured_task_has_a_composition() -> None:
    from cts.tasks.registry import task_spec

    targets = {str(compose_task(p.stem).task._target_) for p in (CONF / "task").glob("*.yaml")}
    assert targets == {f"cts.tasks.{name}" for name in TASKS}
    assert all(callable(task_spec(t).compose) and callable(task_spec(t).read) for t in targets)


def test_task_modules_never_read_the_config() -> None:
    """A task's composer gets a TaskContext from compose; only cts/tasks/job.py still reads a config node."""
    offenders = [
        str(p.relative_to(REPO))
        for p in sorted((PKG / "tasks").glob("*.py"))
        if p.name != "job.py"
        for name in _imports(p)
        if name.split(".")[0] == "omegaconf" or name.startswith("cts.compose")
    ]
    assert not offenders


def compose_task(name: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[f"task={name}"])


def test_llm_roles_get_a_client_booked_under_their_role_and_the_runtime_reask_default(llm_server, tmp_path) -> None:  # noqa: F811
    services = Services(cache_dir=tmp_path, settings={"llm": llm_settings(llm_server, max_reasks=3)})
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=["clarifier=gpt", "judge=ernie", "+judge.role=grader", "qtyper=llm", "qtyper.max_reasks=1"],
        )
    clarifier, judge, typer = (build_node(cfg[g], services) for g in ("clarifier", "judge", "qtyper"))
    assert (clarifier.client.role, clarifier.client.spec.name, clarifier.max_reasks) == ("clarifier", "gpt", 3)
    assert (judge.client.role, judge.client.spec.name) == ("grader", "ernie")
    assert (typer.client.role, typer.max_reasks) == ("qtyper", 1)
    assert clarifier.client.runtime is judge.client.runtime is services.llm  # one runtime per job


def test_resources_are_filled_by_type_and_are_not_config_keys(services) -> None:
    from cts.roles.rules import RuleUserAnswerer
    from cts.search.extractive import ExtractiveSearch

    assert resource_parameters(ExtractiveSearch) == {"index"}
    assert resource_parameters(RuleUserAnswerer) == {"places"}
    search = ExtractiveSearch(**component_arguments(ExtractiveSearch, {"top_k": 2}, services))
    assert search.index is services.index and search.top_k == 2
    ua = RuleUserAnswerer(**component_arguments(RuleUserAnswerer, {}, services))
    assert ua.places is services.memo("place_lexicon", lambda: None)  # built once per job
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=offline", "+search.index=x", "+ua.places=y"])
    problems = preflight_problems_of(cfg, task_groups(cfg))
    assert any(p.startswith("search.index:") for p in problems), problems
    assert any(p.startswith("ua.places:") for p in problems), problems
