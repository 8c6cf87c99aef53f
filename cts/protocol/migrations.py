"""Every rename since the first release, in one table: stored configs migrate, old command lines are told.

:data:`RENAMES` lists each retired name with its new one and the day it changed. Two things are
derived from it:

- the stored-config migrations (:data:`MIGRATIONS`): a job dir stores its protocol config beside
  the fingerprint (``fingerprint.json``); when a key of it is renamed (one name, one meaning), the
  stored config hashes differently although it measures the same thing. :func:`migrate` rewrites a
  stored config into today's names; a dir resumes when the migrated config equals today's
  (:func:`cts.tasks.job.check_resume`), and never otherwise. A migration only renames: a changed
  value still refuses the resume.
- the command line (:func:`renamed_on_command_line`, called by ``run.py`` before Hydra reads it):
  ``services.llm.model=x`` gets one ``error:`` line naming ``services.llm.served_name=x`` instead of
  Hydra's "Key 'model' is not in struct".
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from typing import Any

Config = dict[str, Any]


@dataclass(frozen=True)
class Migration:
    """One rename of the protocol config.

    Attributes:
        what: What changed, as the resume message and the docs say it.
        apply: Rewrites a config in place from the names before the rename to the names after.
    """

    what: str
    apply: Callable[[Config], None]


def rename_path(old: str, new: str) -> Callable[[Config], None]:
    """A migration that moves the value at dotted path ``old`` to dotted path ``new`` (when ``new`` is absent)."""

    def apply(config: Config) -> None:
        *old_parents, old_key = old.split(".")
        *new_parents, new_key = new.split(".")
        source = _node_at(config, old_parents)
        if not isinstance(source, dict) or old_key not in source:
            return
        target: Any = config
        for part in new_parents:
            target = target.setdefault(part, {}) if isinstance(target, dict) else None
        if isinstance(target, dict) and new_key not in target:
            target[new_key] = source.pop(old_key)

    return apply


def _node_at(config: Config, parts: Sequence[str]) -> Any:
    node: Any = config
    for part in parts:
        node = node.get(part) if isinstance(node, dict) else None
    return node


def rename_top_level(old: str, new: str) -> Callable[[Config], None]:
    """A migration that renames the top-level key ``old`` to ``new`` (when ``new`` is absent)."""
    return rename_path(old, new)


def rename_in_nodes(target_suffix: str, old: str, new: str) -> Callable[[Config], None]:
    """A migration that renames key ``old`` to ``new`` in every node whose ``_target_`` ends with ``target_suffix``."""

    def apply(config: Config) -> None:
        for node in _nodes(config):
            if str(node.get("_target_", "")).endswith(target_suffix) and old in node and new not in node:
                node[new] = node.pop(old)

    return apply


def rename_at(path: str, old: str, new: str) -> Callable[[Config], None]:
    """A migration that renames key ``old`` to ``new`` in the node at dotted ``path`` (``services.llm``)."""
    return rename_path(f"{path}.{old}", f"{path}.{new}")


def _nodes(value: Any) -> list[dict[str, Any]]:
    """Every mapping inside ``value``, ``value`` itself included."""
    found: list[dict[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


@dataclass(frozen=True)
class Rename:
    """One name retired since the first release (2026-11-29), with the name that replaced it.

    Attributes:
        old: What a command line said: a dotted config key or node (``services.llm.model``,
            ``gold``), ``<group>=<option>`` (``experiment=gold``), or with ``node`` a key of
            every such node (``model``).
        new: What it says now, in the same form.
        on: The day of the rename.
        what: What the name means, as the message says it.
        protocol: Stored protocol configs hold the old name: :data:`MIGRATIONS` renames it there.
        node: For a key inside nodes: the ``_target_`` suffix of those nodes (``ModelSpec``).
        mounts: For a key inside nodes: the last keys of the paths those nodes are bound at on
            the command line (``clarifier.model``, ``search.summary_model``).
    """

    old: str
    new: str
    on: str
    what: str = ""
    protocol: bool = False
    node: str = ""
    mounts: tuple[str, ...] = ()

    @property
    def group(self) -> str | None:
        """The config group of an option rename (``experiment``), else None."""
        return self.old.split("=", 1)[0] if "=" in self.old else None

    def migration(self) -> Migration:
        """The stored-config migration of this rename."""
        what = f"{self.what}: {self.old} -> {self.new}" if self.what else f"{self.old} -> {self.new}"
        if self.node:
            return Migration(what, rename_in_nodes(self.node, self.old, self.new))
        return Migration(what, rename_path(self.old, self.new))


RENAMES: tuple[Rename, ...] = (
    Rename("gold.fields", "dataset.fields", "2026-12-01", "the instance file's field names", protocol=True),
    Rename("search.max_tokens", "search.max_output_tokens", "2026-12-01", "a search turn's output cap", protocol=True),
    Rename("stats", "bootstrap", "2026-12-01", "the bootstrap settings", protocol=True),
    Rename("services.llm.budget", "services.llm.spend", "2026-12-01", "the USD cap"),
    Rename(
        "model",
        "id",
        "2026-12-01",
        "the litellm id of a model spec",
        protocol=True,
        node="ModelSpec",
        mounts=("model", "summary_model"),
    ),
    Rename(
        "services.llm.model",
        "services.llm.served_name",
        "2026-12-01",
        "the model name sent to services.llm.api_base",
        protocol=True,
    ),
    Rename("gold", "build_gold", "2026-12-01", "the gold build's config node", protocol=True),
    Rename("experiment=gold", "experiment=build_gold", "2026-12-01", "the gold build's preset"),
    Rename("task=gold", "task=build_gold", "2026-12-01", "the gold build's task"),
    Rename("hydra.callbacks.mlflow_store", "hydra.callbacks.cts", "2026-12-01", "the launch's Hydra callbacks"),
)
"""Every rename since the first release, oldest first (each migration applies to any older config)."""


def component_name(target: str) -> str:
    """The name a ``_target_`` has in the protocol config: a cts component's own name, not its module path.

    ``cts.roles.llm.LLMClarifier`` is ``LLMClarifier`` wherever its module moves (names are
    unique among cts's components: tests/compose/test_schema.py); a component of your own
    package keeps its full path.
    """
    return target.rsplit(".", 1)[-1] if target.startswith("cts.") else target


def name_components(config: Config) -> None:
    """Rewrite every ``_target_`` of ``config`` (in place) to its :func:`component_name`."""
    for node in _nodes(config):
        target = node.get("_target_")
        if isinstance(target, str):
            node["_target_"] = component_name(target)


NAMED_COMPONENTS = Migration("components by name, not module path: cts.llm.ModelSpec -> ModelSpec", name_components)
"""2026-12-04: the protocol config names each cts component, so a module move keeps the fingerprint."""

MIGRATIONS: tuple[Migration, ...] = (*(r.migration() for r in RENAMES if r.protocol), NAMED_COMPONENTS)
"""The renames of :data:`RENAMES` that stored protocol configs hold, oldest first, then the component names."""


def migrate(stored: Mapping[str, Any], migrations: tuple[Migration, ...] | None = None) -> Config:
    """``stored`` with every rename of ``migrations`` (default :data:`MIGRATIONS`) applied, in order."""
    config = copy.deepcopy(dict(stored))
    for migration in MIGRATIONS if migrations is None else migrations:
        migration.apply(config)
    return config


def same_config(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two protocol configs are equal as ``fingerprint.json`` stores them (JSON, ``default=str``)."""

    def canonical(x: Mapping[str, Any]) -> str:
        return json.dumps(x, sort_keys=True, default=str, ensure_ascii=False)

    return canonical(a) == canonical(b)


def renamed_on_command_line(args: Sequence[str], config_dirs: Sequence[Traversable] = ()) -> list[str]:
    """One problem line per override of ``args`` that uses a name :data:`RENAMES` retired, naming the new one.

    Args:
        args: The command line after the program (Hydra's flags and their values are skipped).
        config_dirs: The config dirs of the run (``conf/``, ``--config-dir``): an old option that
            still has a file there (a user's own ``experiment/gold.yaml``) is not a rename.
    """
    problems = []
    for arg in _overrides(args):
        for rename in RENAMES:
            fixed = _renamed(arg, rename, config_dirs)
            if fixed is not None:
                what = f" ({rename.what})" if rename.what else ""
                old, new = (
                    (rename.old, rename.new)
                    if not rename.node
                    else (f"{rename.node}.{rename.old}", f"{rename.node}.{rename.new}")
                )
                problems.append(f"{arg}: {old} was renamed to {new} on {rename.on}{what}; use {fixed}")
                break
    return problems


_VALUE_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn", "--experimental-rerun")


def _overrides(args: Sequence[str]) -> list[str]:
    """The overrides of a command line: neither Hydra's flags nor their values."""
    kept, skip = [], False
    for arg in args:
        if skip or arg.startswith("-"):
            skip = arg in _VALUE_FLAGS
            continue
        if "=" in arg or arg.startswith("~"):
            kept.append(arg)
    return kept


def _renamed(arg: str, rename: Rename, config_dirs: Sequence[Traversable]) -> str | None:
    """``arg`` in today's names when it uses ``rename``'s old name, else None."""
    prefix = arg[: len(arg) - len(arg.lstrip("+~"))]
    key, eq, value = arg[len(prefix) :].partition("=")
    if "@" in key:  # group@package=option binds a group, whose options are checked below by name
        key = key.split("@", 1)[0]
    group = rename.group
    if group is not None:
        return _renamed_option(prefix, key, value, rename, config_dirs) if key == group and eq else None
    parts = key.split(".")
    if rename.node:
        if len(parts) >= 3 and parts[-1] == rename.old and parts[-2] in rename.mounts:
            return f"{prefix}{'.'.join([*parts[:-1], rename.new])}{eq}{value}"
        return None
    old = rename.old.split(".")
    if parts[: len(old)] == old:
        return f"{prefix}{'.'.join([*rename.new.split('.'), *parts[len(old) :]])}{eq}{value}"
    return None


def _renamed_option(
    prefix: str, key: str, value: str, rename: Rename, config_dirs: Sequence[Traversable]
) -> str | None:
    """``key=value`` with the old option replaced (every value of a sweep ``a,b``), else None."""
    old, new = rename.old.split("=", 1)[1], rename.new.split("=", 1)[1]
    values = [v.strip() for v in value.split(",")]
    if old not in values or any((d / key / f"{old}.yaml").is_file() for d in config_dirs):
        return None
    return f"{prefix}{key}={','.join(new if v == old else v for v in values)}"
