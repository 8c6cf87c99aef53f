"""A typo'd key under a component, found on the command line before Hydra composes anything.

``clarifier.treshold=1`` sets a key the composed ``clarifier`` node lacks, so Hydra refuses it with
its own message over five lines (in a multirun too, before any sweep dir exists). The keys such a
node can have are known from the files alone: those the group's options set (their defaults too),
those the model roles' generated options set (:func:`cts.core.stages.model_role_nodes`) and those a
``_global_`` preset sets under the group. A key outside all of them is refused with one line; the
signatures of the options' ``_target_`` are read only then, to tell a typo from a parameter no option
sets (which needs ``+``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from importlib.resources.abc import Traversable
from typing import Any

import yaml

from cts.compose.presets import preset_nodes, primary_nodes
from cts.core.stages import model_role_nodes

__all__ = ["component_key_problem", "component_key_problems"]


def component_key_problems(args: Sequence[str], config_dirs: Sequence[Traversable]) -> list[str]:
    """One line per plain override of ``args`` that sets a key no option nor preset of its group sets.

    ``run.py`` checks them beside :func:`cts.compose.validate.command_line_problems`, before Hydra composes anything.
    """
    keys = [arg.split("=", 1)[0] for arg in args if "=" in arg and not arg.startswith(("-", "~", "+"))]
    checked = [key for key in keys if "@" not in key and key.split(".", 1)[0] != "hydra"]  # Hydra's own
    return [p for key in checked if (p := component_key_problem(key, config_dirs)) is not None]


def component_key_problem(key: str, config_dirs: Sequence[Traversable]) -> str | None:
    """The line of a plain ``group.name=value`` override that no option nor preset of ``group`` sets, else None.

    Args:
        key: The override's dotted key (``clarifier.treshold``); only ``<group>.<name>`` is checked.
        config_dirs: The config dirs (``conf/`` and the command line's own).
    """
    group, dot, name = key.partition(".")
    if not dot or "." in name or not any((d / group).is_dir() for d in config_dirs):
        return None
    found = _set_keys(group, tuple(config_dirs))
    if found is None or name in found[0]:
        return None
    accepted = _accepted(found[1])
    if name in accepted:
        return f"{key}: no option of {group} sets it; add it with +{key}=VALUE"
    from cts.compose.validate import no_such_key

    return no_such_key(key, found[0] | accepted, listed=True)


@functools.cache
def _set_keys(group: str, config_dirs: tuple[Traversable, ...]) -> tuple[set[str], tuple[str, ...]] | None:
    """The keys some option or preset sets under ``group``, and the options' targets (None: not a node of its own)."""
    keys: set[str] = set()
    targets: list[str] = []
    role = model_role_nodes().get(group)
    if role is not None:
        keys |= {*role, "model"}  # the generated option binds its model at ``model``
        targets.append(str(role.get("_target_", "")))
    for d in config_dirs:
        for node in _options(d / group):
            if node is None:
                return None  # an option packaged elsewhere: its keys are not this node's
            keys |= {str(k) for k in node if k != "defaults"} | set(_defaults_keys(node.get("defaults")))
            targets.append(str(node.get("_target_", "")))
        keys |= {child.name for child in (d / group).iterdir() if child.is_dir()} if (d / group).is_dir() else set()
    keys |= set(_preset_keys(config_dirs, group))
    return keys, tuple(t for t in targets if t)


def _options(group_dir: Traversable) -> Iterator[dict[str, Any] | None]:
    """The nodes of the option files of a group dir (None for one packaged under another key)."""
    if not group_dir.is_dir():
        return
    for f in group_dir.iterdir():
        if f.name.endswith(".yaml"):
            text = f.read_text(encoding="utf-8")
            first = text.split("\n", 1)[0]
            if "@package" in first and "_group_" not in first:
                yield None
                continue
            node = yaml.safe_load(text)
            yield node if isinstance(node, dict) else {}


def _defaults_keys(defaults: Any) -> Iterator[str]:
    """The keys a defaults list fills: ``/model@model: x`` fills ``model``, ``provider: x`` fills ``provider``."""
    for entry in defaults if isinstance(defaults, list) else ():
        if isinstance(entry, dict):
            for k in entry:
                path = str(k).removeprefix("override ").strip()
                yield path.rpartition("@")[2].split(".")[0] if "@" in path else path.strip("/").split("/")[-1]


def _preset_keys(config_dirs: tuple[Traversable, ...], group: str) -> Iterator[str]:
    """The keys the ``_global_`` files (and the primary configs) of ``config_dirs`` set under ``group``."""
    for node in (*(p.node for p in preset_nodes(config_dirs)), *primary_nodes(config_dirs)):
        part = node.get(group)
        if isinstance(part, dict):
            yield from (str(k) for k in part)


def _accepted(targets: tuple[str, ...]) -> set[str]:
    """The config keys the components ``targets`` take (by their signatures; unloadable ones take none)."""
    from cts.compose.checks import accepted_keys

    found: set[str] = set()
    for target in targets:
        try:
            found |= accepted_keys(target) or set()
        except (ImportError, AttributeError, ValueError, TypeError):  # the pre-flight says it cannot load
            continue
    return found
