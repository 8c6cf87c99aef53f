"""One-file model registry: ``conf/model/<name>.yaml`` makes ``clarifier=<name>`` (and ua, ...) work.

Hydra calls :class:`ModelRolesSearchPathPlugin` when it builds the config search path.
It scans the ``model/`` group of every file-system entry of that path and registers,
in Hydra's ConfigStore, one option per model in each LLM role group (clarifier, ua,
rewriter, judge, extractor): the role's ``_target_`` and prompt, with the model bound
by the package override ``/model@model: <name>``. An option that exists as a file
(``conf/clarifier/rules_scope.yaml``, or a hand-written ``conf/judge/<model>.yaml``)
wins over the generated one, because file entries come first in the search path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.plugins.search_path_plugin import SearchPathPlugin

ROLES: dict[str, dict[str, Any]] = {
    # mode: batch (k questions at once, the paper) or sequential (one per turn);
    # stop_early (sequential only): the clarifier may stop when the answers so far suffice.
    "clarifier": {"_target_": "cts.roles.llm.LLMClarifier", "prompt": "clarifier",
                  "mode": "batch", "stop_early": False},
    "ua": {"_target_": "cts.roles.llm.LLMUserAnswerer", "prompt": "ua"},
    "rewriter": {"_target_": "cts.roles.llm.LLMRewriter", "prompt": "rewriter"},
    "judge": {"_target_": "cts.roles.llm.LLMJudge", "prompt": "judge"},
    "extractor": {"_target_": "cts.roles.llm.LLMExtractor", "prompt": "extractor"},
}
"""Per LLM role group: the class and prompt (``prompts/<prompt>.md``) every model plays it with."""


def model_names(config_dirs: list[Path]) -> list[str]:
    """Names of the ``model/*.yaml`` files under ``config_dirs`` (first occurrence kept)."""
    names: dict[str, None] = {}
    for d in config_dirs:
        for f in sorted((d / "model").glob("*.yaml")):
            names.setdefault(f.stem, None)
    return list(names)


def role_node(group: str, model: str) -> dict[str, Any]:
    """The config node of role ``group`` played by registry entry ``model``."""
    return {"defaults": [{"/model@model": model}, "_self_"], **ROLES[group]}


def register(config_dirs: list[Path], store: ConfigStore | None = None) -> list[str]:
    """Register every model of ``config_dirs`` in every role group; return the model names."""
    store = store or ConfigStore.instance()
    names = model_names(config_dirs)
    for model in names:
        for group in ROLES:
            if not any((d / group / f"{model}.yaml").exists() for d in config_dirs):
                store.store(group=group, name=model, node=role_node(group, model),
                            provider="cts_model_roles")
    return names


def file_dirs(search_path: ConfigSearchPath) -> list[Path]:
    """The file-system directories of a config search path (``file://`` entries)."""
    out = []
    for element in search_path.get_path():
        path = element.path or ""
        if path.startswith("file://"):
            out.append(Path(path[len("file://"):]))
        elif "://" not in path and path:
            out.append(Path(path))
    return [p for p in out if p.is_dir()]


class ModelRolesSearchPathPlugin(SearchPathPlugin):
    """Registers model-bound role options; leaves the search path itself unchanged."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        """Scan the search path's model registries and fill the ConfigStore."""
        register(file_dirs(search_path))
