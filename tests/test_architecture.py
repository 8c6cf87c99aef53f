"""The package's shape: layer order of imports (no cycles, nothing upward) and module size.

The layer order is the one the README states; a module may import only from its own
layer or the layers before it, and the import graph has no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.layers import LAYERS, PKG, layer_of, module_name

MAX_LINES = 400


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The cts modules ``path`` imports (any depth: lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            while n and n not in modules:
                n = n.rpartition(".")[0]
            if n:
                found.add(n)
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    return {m: imports_of(p, set(files)) - {m} for m, p in files.items()}


def test_no_upward_import() -> None:
    bad = [
        f"{m} ({LAYERS[layer_of(m)][0]}) imports {d} ({LAYERS[layer_of(d)][0]})"
        for m, deps in graph().items()
        for d in deps
        if layer_of(d) > layer_of(m) and not m.startswith(d + ".") and d != "cts"
    ]
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycle() -> None:
    g = graph()
    # A package's __init__ re-exporting its own submodules is not a cycle between modules.
    edges = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in g.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                cycles.append(path[path.index(d) :] + [d] if d in path else [m, d])
            elif d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_module_size(path: Path) -> None:
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{path.name}: {n} lines (max {MAX_LINES}); split it by concern"


def test_error_kinds_produced_are_declared() -> None:
    """Every ``ErrorInfo(stage, kind, ...)`` literal names a kind of :data:`cts.core.types.ErrorKind`."""
    from typing import get_args

    from cts.core.types import ErrorKind

    produced = set()
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ErrorInfo" and len(node.args) >= 2:
                if isinstance(node.args[1], ast.Constant):
                    produced.add(node.args[1].value)
    assert produced and produced <= set(get_args(ErrorKind)), produced - set(get_args(ErrorKind))


def test_root_holds_packages_only() -> None:
    """``ls cts`` shows the architecture: packages and ``__init__.py``, no loose module."""
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules at the root of cts: {loose}; put each in the package of its layer"


def test_every_package_has_a_layer() -> None:
    """Each package under cts/ is named in LAYERS (the map the README shows)."""
    named = {p for _, prefixes in LAYERS for p in prefixes}
    packages = {f"cts.{d.name}" for d in PKG.iterdir() if (d / "__init__.py").exists()}
    assert packages <= named, sorted(packages - named)


_CONFIG_READERS = ("cts.compose", "cts.sweep", "cts._util.naming", *LAYERS[-1][1])
"""Where the config is read: the composition layer, the launcher's session (it hands ``HydraConfig``
from job to job), Hydra's resolver for job names, and the entry points that compose their own
command line (``python -m cts.gating``, ``cts.plan`` ...). Everything else takes plain objects."""
_CONFIG_NAMES = {"DictConfig", "ListConfig", "HydraConfig"}
_CONFIG_CALLS = {"select", "to_container", "masked_copy", "to_object"}


def _reads_config(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module in ("omegaconf", "hydra.core.hydra_config"):
            found += [a.name for a in node.names if a.name in _CONFIG_NAMES]
        elif isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "OmegaConf":
            found += [f"OmegaConf.{node.attr}"] if node.attr in _CONFIG_CALLS else []
    return found


def test_only_the_composition_layer_reads_the_config() -> None:
    """Tasks, the protocol and the components never read the config or Hydra's runtime (``cts.compose`` does)."""
    bad = {}
    for path in PKG.rglob("*.py"):
        name = module_name(path)
        if not any(name == p or name.startswith(p + ".") for p in _CONFIG_READERS) and (found := _reads_config(path)):
            bad[name] = sorted(set(found))
    assert not bad, bad
