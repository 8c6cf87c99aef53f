"""The migrations of a stored config: each renames one name in place, never a value."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


def rename_in_nodes(target_suffix: str, old: str, new: str) -> Callable[[Config], None]:
    """A migration that renames key ``old`` to ``new`` in every node whose ``_target_`` ends with ``target_suffix``."""

    def apply(config: Config) -> None:
        for node in nodes(config):
            if str(node.get("_target_", "")).endswith(target_suffix) and old in node and new not in node:
                node[new] = node.pop(old)

    return apply


def rename_target(old: str, new: str) -> Callable[[Config], None]:
    """A migration that rewrites every ``_target_`` naming ``old`` (a module or object path, or a path under it) to ``new``."""

    def apply(config: Config) -> None:
        for node in nodes(config):
            value = node.get("_target_")
            if isinstance(value, str):
                node["_target_"] = moved(value, old, new)

    return apply


def moved(path: str, old: str, new: str) -> str:
    """``path`` with its leading ``old`` (the whole path, or a module of it) replaced by ``new``."""
    return new + path[len(old) :] if path == old or path.startswith(old + ".") else path


def nodes(value: Any) -> list[dict[str, Any]]:
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
