"""The ``_global_`` presets and the primary configs of the config dirs, parsed once per process.

Two command-line checks need them before Hydra composes anything: the first keys a preset adds
(:func:`cts.compose.validate.command_line_problems`) and the keys a preset sets under a component
(:func:`cts.compose.component_keys.component_key_problems`). Both read them here, so a command line
with a component key parses each file once.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from typing import Any, cast

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml parses the model files ten times faster

__all__ = ["ConfigFile", "Preset", "config_file", "defaults_packages", "preset_nodes", "primary_nodes"]


@dataclass(frozen=True)
class Preset:
    """One ``# @package _global_`` file: its node and where it lies."""

    node: Mapping[str, Any]
    """The file's top mapping (empty when the file holds none)."""
    in_group: bool
    """The file is an option of a group dir; False: it lies directly in a config dir."""


@dataclass(frozen=True)
class ConfigFile:
    """One YAML config file, parsed when its node is first asked for."""

    text: str

    @property
    def header(self) -> str:
        """Its first line (where ``# @package ...`` is)."""
        return self.text.split("\n", 1)[0]

    @property
    def is_global(self) -> bool:
        """A ``# @package _global_`` file (a preset)."""
        return "@package _global_" in self.header

    @functools.cached_property
    def node(self) -> Mapping[str, Any]:
        """Its top mapping (empty when the file holds none)."""
        node = yaml.load(self.text, Loader=_LOADER)
        return node if isinstance(node, dict) else {}


def config_file(f: Traversable) -> ConfigFile:
    """The file ``f``, read once per process (every command-line check reads it here)."""
    return _config_file(cast(Hashable, f))  # every Traversable of a config dir (a path) is hashable


@functools.cache
def _config_file(key: Hashable) -> ConfigFile:
    return ConfigFile(cast("Traversable", key).read_text(encoding="utf-8"))


@functools.cache
def preset_nodes(config_dirs: tuple[Traversable, ...]) -> tuple[Preset, ...]:
    """The ``# @package _global_`` files of ``config_dirs``, in any dir."""
    found = ((config_file(f), top) for d in config_dirs for f, top in _yaml_files(d, top=True))
    return tuple(Preset(c.node, in_group=not top) for c, top in found if c.is_global)


@functools.cache
def primary_nodes(config_dirs: tuple[Traversable, ...]) -> tuple[Mapping[str, Any], ...]:
    """The primary configs of ``config_dirs``: the files directly in a config dir that name no package."""
    files = (config_file(f) for d in config_dirs for f in d.iterdir() if f.name.endswith(".yaml"))
    return tuple(c.node for c in files if "@package" not in c.header)


def defaults_packages(node: Mapping[str, Any]) -> Iterator[str]:
    """The packages a node's defaults list fills: ``/model@clarifier.model: x`` gives ``clarifier.model``."""
    for entry in node.get("defaults") or ():
        yield from (str(k).partition("@")[2] for k in (entry if isinstance(entry, dict) else ()))


def _yaml_files(d: Traversable, *, top: bool = False) -> Iterator[tuple[Traversable, bool]]:
    """The YAML files under ``d``, each with whether it is directly in the config dir."""
    for child in d.iterdir():
        if child.is_dir():
            yield from _yaml_files(child)
        elif child.name.endswith(".yaml"):
            yield child, top
