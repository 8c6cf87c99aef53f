"""The ``_global_`` presets and the primary configs of the config dirs, parsed once per process.

Two command-line checks need them before Hydra composes anything: the first keys a preset adds
(:func:`cts.compose.validate.command_line_problems`) and the keys a preset sets under a component
(:func:`cts.compose.component_keys.component_key_problems`). Both read them here, so a command line
with a component key parses each file once.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from typing import Any

import yaml

__all__ = ["Preset", "preset_nodes", "primary_nodes"]


@dataclass(frozen=True)
class Preset:
    """One ``# @package _global_`` file: its node and where it lies."""

    node: Mapping[str, Any]
    """The file's top mapping (empty when the file holds none)."""
    in_group: bool
    """The file is an option of a group dir; False: it lies directly in a config dir."""


@functools.cache
def preset_nodes(config_dirs: tuple[Traversable, ...]) -> tuple[Preset, ...]:
    """The ``# @package _global_`` files of ``config_dirs``, in any dir."""
    found = []
    for f, top in (item for d in config_dirs for item in _yaml_files(d, top=True)):
        text = f.read_text(encoding="utf-8")
        if "@package _global_" in text.split("\n", 1)[0]:
            found.append(Preset(_node(text), in_group=not top))
    return tuple(found)


@functools.cache
def primary_nodes(config_dirs: tuple[Traversable, ...]) -> tuple[Mapping[str, Any], ...]:
    """The primary configs of ``config_dirs``: the files directly in a config dir that name no package."""
    texts = (f.read_text(encoding="utf-8") for d in config_dirs for f in d.iterdir() if f.name.endswith(".yaml"))
    return tuple(_node(text) for text in texts if "@package" not in text.split("\n", 1)[0])


def _node(text: str) -> Mapping[str, Any]:
    node = yaml.safe_load(text)
    return node if isinstance(node, dict) else {}


def _yaml_files(d: Traversable, *, top: bool = False) -> Iterator[tuple[Traversable, bool]]:
    """The YAML files under ``d``, each with whether it is directly in the config dir."""
    for child in d.iterdir():
        if child.is_dir():
            yield from _yaml_files(child)
        elif child.name.endswith(".yaml"):
            yield child, top
