"""One-file model registry: ``conf/model/<name>.yaml`` makes ``clarifier=<name>`` (and ua, ...) work.

Hydra calls :class:`ModelRolesSearchPathPlugin` when it builds the config search path.
It scans the ``model/`` group of every config dir of that path (``file://`` and
``pkg://`` entries) and registers, in Hydra's ConfigStore, one option per model in
each LLM role group (every declared stage and aide with a node, :mod:`cts.core.stages`): the role's
``_target_`` and prompt, with the model bound by the package override
``/model@model: <name>``. An option that exists as a file (``conf/clarifier/rules_scope.yaml``,
or a hand-written ``conf/judge/<model>.yaml``) wins over the generated one, because
file entries come before the ConfigStore in the search path.

Hydra builds that search path before it reads the command line's ``--config-dir`` and
``hydra.searchpath=[...]`` (``hydra/_internal/utils.py``: ``run_hydra`` calls the
search path plugins in ``create_config_search_path``, then prepends ``--config-dir``;
``config_loader_impl.py``: ``_process_config_searchpath`` appends ``hydra.searchpath``
only when a config is composed, and no plugin runs after it). So the plugin also reads
those two from the process's command line (:func:`command_line_dirs`). ``hydra.searchpath``
given to the compose API (``compose(overrides=[...])``) is not seen: there, pass the dir
to ``initialize_config_dir`` or use a model of the search path with
``model@clarifier.model=<name>``.
"""

from __future__ import annotations

import importlib.resources
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.plugins.search_path_plugin import SearchPathPlugin

from cts.core.stages import model_role_nodes

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

ROLES: dict[str, Mapping[str, Any]] = model_role_nodes()
"""Per LLM role group: the class, prompt (``prompts/<prompt>.md``) and output cap every model plays it with
(declared with its stage, :mod:`cts.core.stages`; read again at each registration, so a stage declared
later gets its group too)."""


def model_names(config_dirs: Sequence[Traversable]) -> list[str]:
    """Names of the ``model/*.yaml`` files under ``config_dirs`` (first occurrence kept)."""
    names: dict[str, None] = {}
    for d in config_dirs:
        models = d / "model"
        found = sorted(f.name for f in models.iterdir() if f.name.endswith(".yaml")) if models.is_dir() else []
        for name in found:
            names.setdefault(name[: -len(".yaml")], None)
    return list(names)


SLOTS: dict[str, list[dict[str, Any]]] = {"ua": [{"persona": None}]}
"""Optional sub-groups of a role, empty by default (``ua/persona=terse``: conf/ua/persona/)."""


def role_node(group: str, model: str) -> dict[str, Any]:
    """The config node of role ``group`` played by registry entry ``model``."""
    return {"defaults": [{"/model@model": model}, *SLOTS.get(group, []), "_self_"], **model_role_nodes()[group]}


MEMBER_GROUPS = {"judge/members": "judge"}
"""Groups whose options are keyed by their name (a multi-select: ``judge/members=[ernie,gpt]``) -> the role they play."""


def member_node(group: str, model: str) -> dict[str, Any]:
    """The option ``model`` of a keyed group: the role node under the key ``model`` (e.g. a judge panel's member)."""
    return {
        "defaults": [{f"/model@{model}.model": model}, "_self_"],
        model: dict(model_role_nodes()[MEMBER_GROUPS[group]]),
    }


def register(config_dirs: Sequence[Traversable], store: ConfigStore | None = None) -> list[str]:
    """Register every model of ``config_dirs`` in every role group (and keyed group); return the model names."""
    store = store or ConfigStore.instance()
    names = model_names(config_dirs)
    for model in names:
        for group in model_role_nodes():
            if not any((d / group / f"{model}.yaml").is_file() for d in config_dirs):
                store.store(group=group, name=model, node=role_node(group, model), provider="cts_model_roles")
        for group in MEMBER_GROUPS:
            if not any((d / group / f"{model}.yaml").is_file() for d in config_dirs):
                store.store(group=group, name=model, node=member_node(group, model), provider="cts_model_roles")
    return names


def config_dir(path: str) -> Traversable | None:
    """The directory of one search path entry (``file://``, ``pkg://`` or a plain path), if it exists."""
    if path.startswith("pkg://"):
        try:
            found: Traversable = importlib.resources.files(path[len("pkg://") :].replace("/", ".").rstrip("."))
        except (ImportError, TypeError, ValueError):  # no such package: Hydra warns about it itself
            return None
    elif path and (path.startswith("file://") or "://" not in path):
        found = Path(path.removeprefix("file://"))
    else:
        return None  # structured:// holds no files
    return found if found.is_dir() else None


def file_dirs(search_path: ConfigSearchPath) -> list[Traversable]:
    """The config directories of a config search path (``file://`` and ``pkg://`` entries)."""
    return [d for d in (config_dir(e.path or "") for e in search_path.get_path()) if d is not None]


def command_line_dirs(argv: Sequence[str]) -> list[Traversable]:
    """The dirs of ``--config-dir``/``-cd`` and of a ``hydra.searchpath=[...]`` override in ``argv``."""
    paths: list[str] = []
    for i, arg in enumerate(argv[1:], start=1):
        if arg in ("--config-dir", "-cd") and i + 1 < len(argv):
            paths.append(str(Path(argv[i + 1]).absolute()))
        elif arg.startswith("--config-dir="):
            paths.append(str(Path(arg.split("=", 1)[1]).absolute()))
        elif arg.lstrip("+").startswith("hydra.searchpath="):
            paths.extend(_searchpath_value(arg))
    return [d for d in (config_dir(p) for p in paths) if d is not None]


def _searchpath_value(arg: str) -> list[str]:
    try:
        value = OverridesParser.create().parse_override(arg).value()
    except HydraException:  # Hydra reports the malformed override itself
        return []
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


class ModelRolesSearchPathPlugin(SearchPathPlugin):
    """Registers model-bound role options; leaves the search path itself unchanged."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        """Scan the model registries of the search path and the command line; fill the ConfigStore."""
        register([*file_dirs(search_path), *command_line_dirs(sys.argv)])
