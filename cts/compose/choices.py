"""Which option of a config group a command line's jobs compose, read from the files before Hydra runs.

A key that one option of a group sets and another lacks (``clarifier.order`` under ``clarifier=none``)
is refused by Hydra with five lines. To say it in one, :func:`chosen_options` finds the option each
job composes: the command line's ``group=option`` (its swept values too), else the override of a
chosen ``_global_`` preset (``experiment=offline`` sets ``clarifier: rules_scope``), else the primary
config's default. Whenever that cannot be known for sure (another primary config, a group deleted or
swept by a pattern, two presets that both set it, a package override), it answers None and the
caller stays silent.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from importlib.resources.abc import Traversable
from typing import Any

from cts.compose.presets import config_file, defaults_packages, primary_nodes

__all__ = ["chosen_options", "presets_set"]

_MAX_JOBS = 256  # preset combinations looked at; more: not known for sure
_CONFIG_FLAGS = ("--config-name", "-cn", "--config-path", "-cp")
_UNSET = object()


def chosen_options(group: str, args: Sequence[str], config_dirs: Sequence[Traversable]) -> frozenset[str] | None:
    """The options of ``group`` (``clarifier``) the jobs of ``args`` compose; None when not known for sure."""
    if any(a.split("=", 1)[0] in _CONFIG_FLAGS for a in args) or _package_override(group, args):
        return None
    given = _command_line_choice(group, args)
    if given is not _UNSET:
        return given if given is None else frozenset(given)
    default = _primary_default(group, tuple(config_dirs))
    found: set[str] = set()
    for presets in _preset_combinations(args, tuple(config_dirs)):
        if presets is None:
            return None
        picked = {v for p in presets if (v := _defaults_choice(p.get("defaults"), group)) is not _UNSET}
        if len(picked) > 1 or None in picked or (not picked and default is None):
            return None
        found |= picked or {str(default)}
    return frozenset(found)


def presets_set(group: str, name: str, args: Sequence[str], config_dirs: Sequence[Traversable]) -> bool:
    """Whether a ``_global_`` preset some job of ``args`` composes (or the primary config) sets ``group.name``.

    True too when the presets are not known for sure.
    """
    dirs = tuple(config_dirs)
    nodes = [n for combo in _preset_combinations(args, dirs) for n in (combo if combo is not None else [None])]
    return any(n is None or _sets(n, group, name) for n in (*nodes, *primary_nodes(dirs)))


def _sets(node: Mapping[str, Any], group: str, name: str) -> bool:
    """``node`` sets ``group.name``: in its ``group`` node or by a package in its defaults (``/model@group.name``)."""
    part = node.get(group)
    if isinstance(part, dict) and name in part:
        return True
    return any(p == f"{group}.{name}" or p.startswith(f"{group}.{name}.") for p in defaults_packages(node))


def _package_override(group: str, args: Sequence[str]) -> bool:
    """An override such as ``model@clarifier.model=gpt`` adds a node under ``group`` the files do not show."""
    packages = (a.split("=", 1)[0].partition("@")[2] for a in args if "@" in a.split("=", 1)[0])
    return any(p == group or p.startswith(f"{group}.") for p in packages)


def _command_line_choice(group: str, args: Sequence[str]) -> Any:
    """The command line's options of ``group``: a list, None (unknowable or deleted), or _UNSET (not given)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep
    from hydra.errors import HydraException

    names = {group, group.replace("/", ".")}
    found: Any = _UNSET
    for arg in args:
        if arg.startswith("-") or arg.lstrip("+~").split("=", 1)[0] not in names:
            continue
        try:
            value = OverridesParser.create().parse_override(arg).value()
        except HydraException:
            return None
        if arg.startswith("~") or value is None:
            found = None
        elif isinstance(value, ChoiceSweep) and all(isinstance(v, str) for v in value.list):
            found = [str(v) for v in value.list]
        else:
            found = [value] if isinstance(value, str) else None
    return found


def _primary_default(group: str, config_dirs: tuple[Traversable, ...]) -> str | None:
    """The option the primary config's defaults list picks for ``group`` (None: none, or not one primary config)."""
    primaries = [p for p in primary_nodes(config_dirs) if isinstance(p.get("defaults"), list)]
    if len(primaries) != 1:
        return None
    choice = _defaults_choice(primaries[0]["defaults"], group)
    return None if choice is _UNSET else choice


def _defaults_choice(defaults: Any, group: str) -> Any:
    """The option a defaults list picks for ``group`` (``override /clarifier: x`` or ``clarifier: x``), else _UNSET."""
    found: Any = _UNSET
    for entry in defaults if isinstance(defaults, list) else ():
        for key, value in entry.items() if isinstance(entry, dict) else ():
            if str(key).removeprefix("override ").strip().strip("/") == group:
                found = value if isinstance(value, str) else None
    return found


def _preset_combinations(
    args: Sequence[str], config_dirs: tuple[Traversable, ...]
) -> Iterator[tuple[Mapping[str, Any], ...] | None]:
    """The ``_global_`` presets of each job of ``args``, one tuple per job (None: not known for sure)."""
    per_group = []
    for group in _preset_groups(config_dirs):
        given = _command_line_choice(group, args)
        options = [_primary_default(group, config_dirs)] if given is _UNSET else given
        if options is None:
            yield None
            return
        per_group.append([o for o in options if o is not None])
    combos = list(itertools.islice(itertools.product(*[g or [None] for g in per_group]), _MAX_JOBS + 1))
    if len(combos) > _MAX_JOBS:
        yield None
        return
    groups = _preset_groups(config_dirs)
    for combo in combos:
        found = [_preset(g, o, config_dirs) for g, o in zip(groups, combo, strict=True) if o is not None]
        nodes = tuple(n for n in found if n is not None)
        yield None if len(nodes) < len(found) or any(_picks_a_preset(n, groups, config_dirs) for n in nodes) else nodes


def _picks_a_preset(
    node: Mapping[str, Any] | None, groups: tuple[str, ...], config_dirs: tuple[Traversable, ...]
) -> bool:
    """A preset that picks another preset (whose own picks this module does not follow)."""
    picks = (_defaults_choice((node or {}).get("defaults"), g) for g in groups)
    return any(isinstance(c, str) and _preset(g, c, config_dirs) for g, c in zip(groups, picks, strict=True))


@functools.cache
def _preset_groups(config_dirs: tuple[Traversable, ...]) -> tuple[str, ...]:
    """The groups (top-level dirs) with a ``# @package _global_`` option (``experiment``, ``task``)."""
    return tuple(
        sorted(
            {
                d.name
                for root in config_dirs
                for d in root.iterdir()
                if d.is_dir()
                and d.name != "hydra"
                and any(_is_global(f) for f in d.iterdir() if f.name.endswith(".yaml"))
            }
        )
    )


def _is_global(f: Traversable) -> bool:
    return config_file(f).is_global


def _preset(group: str, option: str, config_dirs: tuple[Traversable, ...]) -> Mapping[str, Any] | None:
    """The node of option ``option`` of preset group ``group``: {} for a plain option, None when not found."""
    for d in config_dirs:
        f = d / group / f"{option}.yaml"
        if f.is_file():
            parsed = config_file(f)
            return parsed.node if parsed.is_global else {}
    return None
