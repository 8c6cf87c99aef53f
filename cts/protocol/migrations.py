"""Renames of protocol config keys, so that a job dir written before a rename still resumes.

A job dir stores its protocol config beside the fingerprint (``fingerprint.json``). When a key
is renamed (one name, one meaning), the stored config hashes differently although it measures
the same thing. :func:`migrate` rewrites a stored config into today's names; a dir resumes when
the migrated config equals today's (:func:`cts.tasks.job.check_resume`), and never otherwise.
A migration only renames: a changed value still refuses the resume.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
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


def rename_top_level(old: str, new: str) -> Callable[[Config], None]:
    """A migration that renames the top-level key ``old`` to ``new`` (when ``new`` is absent)."""

    def apply(config: Config) -> None:
        if old in config and new not in config:
            config[new] = config.pop(old)

    return apply


def rename_in_nodes(target_suffix: str, old: str, new: str) -> Callable[[Config], None]:
    """A migration that renames key ``old`` to ``new`` in every node whose ``_target_`` ends with ``target_suffix``."""

    def apply(config: Config) -> None:
        for node in _nodes(config):
            if str(node.get("_target_", "")).endswith(target_suffix) and old in node and new not in node:
                node[new] = node.pop(old)

    return apply


def rename_at(path: str, old: str, new: str) -> Callable[[Config], None]:
    """A migration that renames key ``old`` to ``new`` in the node at dotted ``path`` (``services.llm``)."""

    def apply(config: Config) -> None:
        node: Any = config
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and old in node and new not in node:
            node[new] = node.pop(old)

    return apply


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


MIGRATIONS: tuple[Migration, ...] = (
    Migration("stats -> bootstrap (the bootstrap settings)", rename_top_level("stats", "bootstrap")),
    Migration("the litellm id of a model spec: ModelSpec.model -> id", rename_in_nodes("ModelSpec", "model", "id")),
    Migration(
        "the model name sent to services.llm.api_base: services.llm.model -> services.llm.served_name",
        rename_at("services.llm", "model", "served_name"),
    ),
    Migration("the gold build's config node: gold -> build_gold", rename_top_level("gold", "build_gold")),
)
"""Every rename since protocol configs were stored, oldest first (each applies to any older config)."""


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
