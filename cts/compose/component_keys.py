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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib.resources.abc import Traversable
from typing import Any

from cts.compose.choices import chosen_options, presets_set
from cts.compose.presets import config_file, defaults_packages, preset_nodes, primary_nodes
from cts.core.stages import model_role_nodes

__all__ = ["chosen_option_problem", "component_key_problem", "component_key_problems"]


def component_key_problems(args: Sequence[str], config_dirs: Sequence[Traversable]) -> list[str]:
    """One line per override of ``args`` (plain or appended) that sets a key no option nor preset of its group sets.

    ``run.py`` checks them beside :func:`cts.compose.validate.command_line_problems`, before Hydra composes anything.
    """
    keys = [arg.split("=", 1)[0] for arg in args if "=" in arg and not arg.startswith(("-", "~"))]
    checked = [key for key in keys if "@" not in key and key.lstrip("+").split(".", 1)[0] != "hydra"]  # Hydra's own
    return [p for key in checked if (p := component_key_problem(key, config_dirs, args)) is not None]


def component_key_problem(key: str, config_dirs: Sequence[Traversable], args: Sequence[str] = ()) -> str | None:
    """The line of a ``group.name=value`` override that no option nor preset of ``group`` sets, else None.

    A plain key some option sets is also refused when an option the jobs of ``args`` compose lacks it
    (:func:`chosen_option_problem`). An appended one (``+clarifier.structured``) must be a parameter some
    option's ``_target_`` takes (silent when a target takes ``**kwargs`` or cannot be loaded).

    Args:
        key: The override's dotted key (``clarifier.treshold``, ``+clarifier.treshold``); only
            ``<group>.<name>`` is checked.
        config_dirs: The config dirs (``conf/`` and the command line's own).
        args: The whole command line (which options of ``group`` its jobs compose).
    """
    appended = key.startswith("+")
    key = key.lstrip("+")
    group, dot, rest = key.partition(".")
    if not dot or not _is_group(group, tuple(config_dirs)) or _is_group(key.replace(".", "/"), tuple(config_dirs)):
        return None
    name = rest.split(".", 1)[0]
    found = _set_keys(group, tuple(config_dirs))
    if found is None:
        return None
    if name in found[0] and not appended:
        chosen = chosen_option_problem(group, name, args, tuple(config_dirs))
        if chosen is not None or "." not in rest:
            return chosen
    return _node_key_problem(key, group, rest.split("."), appended, tuple(config_dirs))


def _node_key_problem(
    key: str, group: str, parts: list[str], appended: bool, config_dirs: tuple[Traversable, ...]
) -> str | None:
    """The line of ``key`` whose ``parts`` lie under a node filled by an option of ``group``, else None.

    Deeper keys are checked where the node's keys are known: a sub-group (``search.provider.x``) or a
    node a defaults list fills from a group (``clarifier.model.temprature``: the ``model`` files and
    :class:`cts.llm.ModelSpec`); a node set inline (``search.fetcher``) is left alone.
    """
    found = _set_keys(group, config_dirs)
    node_path = key.rsplit(".", len(parts))[0]
    if found is None or (appended and len(parts) == 1 and parts[0] in found[0]):
        return None
    keys = found[0] | set(_path_keys(config_dirs, node_path.split(".")))
    if parts[0] in keys:
        child = _child_group(group, parts[0], config_dirs) if len(parts) > 1 else None
        return None if child is None else _node_key_problem(key, child, parts[1:], appended, config_dirs)
    if len(parts) > 1:
        return None
    accepted, every = _accepted(found[1])
    if appended and (parts[0] in accepted or not every):
        return None
    if parts[0] in accepted:
        return f"{key}: no option of {node_path} sets it; add it with +{key}=VALUE"
    from cts.compose.validate import no_such_key

    return no_such_key(key, keys | accepted, listed=True)


def _child_group(group: str, child: str, config_dirs: tuple[Traversable, ...]) -> str | None:
    """The group whose options fill key ``child`` of ``group``'s node (None: set inline, by several, or unknown)."""
    if _is_group(f"{group}/{child}", config_dirs):
        return f"{group}/{child}"
    found = {"model"} if group in model_role_nodes() and child == "model" else set()
    for node in (n for d in config_dirs for n in _options(d / group)):
        if node is None or child in node:
            return None
        for entry in node.get("defaults") or ():
            for path in entry if isinstance(entry, dict) else ():
                source, at, package = str(path).removeprefix("override ").strip().partition("@")
                if at and package == child:
                    found.add(source[1:] if source.startswith("/") else f"{group}/{source}")
    return found.pop() if len(found) == 1 else None


def chosen_option_problem(
    group: str, name: str, args: Sequence[str], config_dirs: tuple[Traversable, ...]
) -> str | None:
    """The line of ``group.name``, a key some option of ``group`` sets, when an option the jobs compose lacks it.

    ``clarifier=none clarifier.order=[time]``: ``clarifier.order: clarifier=none does not take it
    (clarifier=rules_region,rules_scope do)``. Silent when the chosen options are not known for sure
    (:func:`cts.compose.choices.chosen_options`) or when a preset the jobs compose, or the primary config, sets
    the key.
    """
    chosen = chosen_options(group, args, config_dirs)
    if chosen is None or presets_set(group, name, args, config_dirs):
        return None
    keys = {option: _option_keys(group, option, config_dirs) for option in _all_options(group, config_dirs) | chosen}
    lacking = sorted(o for o in chosen if (k := keys.get(o)) is not None and name not in k)
    if not lacking:
        return None
    having = sorted(o for o, k in keys.items() if k is not None and name in k)
    if not having:
        return None  # only a preset sets it: Hydra's message names the key
    verb = "does" if len(lacking) == 1 else "do"
    return f"{group}.{name}: {group}={','.join(lacking)} {verb} not take it ({group}={','.join(having)} do)"


def _is_group(group: str, config_dirs: tuple[Traversable, ...]) -> bool:
    return any((d / group).is_dir() for d in config_dirs)


def _all_options(group: str, config_dirs: tuple[Traversable, ...]) -> set[str]:
    """The options of ``group``: its files, and every model's when it is an LLM role."""
    files = {f.name for d in config_dirs if _is_group(group, (d,)) for f in (d / group).iterdir()}
    models = set(_model_names(config_dirs)) if group in model_role_nodes() else set()
    return {f[: -len(".yaml")] for f in files if f.endswith(".yaml")} | models


def _model_names(config_dirs: tuple[Traversable, ...]) -> list[str]:
    found = (f.name for d in config_dirs if (d / "model").is_dir() for f in (d / "model").iterdir())
    return [name[: -len(".yaml")] for name in found if name.endswith(".yaml")]


@functools.cache
def _option_keys(group: str, option: str, config_dirs: tuple[Traversable, ...]) -> frozenset[str] | None:
    """The keys option ``option`` of ``group`` gives its node (None: not known, e.g. packaged elsewhere or absent).

    A file of that name in several config dirs (a user's ``--config-dir`` beside ``conf/``): the keys of any.
    """
    files = [f for d in config_dirs if (f := d / group / f"{option}.yaml").is_file()]
    nodes = list(_options_of(files))
    if files:
        if any(node is None for node in nodes):
            return None
        return frozenset(set().union(*(_node_keys(n) for n in nodes if n)))
    role = model_role_nodes().get(group)
    if role is None or option not in _model_names(config_dirs):
        return None
    subgroups = {c.name for d in config_dirs if _is_group(group, (d,)) for c in (d / group).iterdir() if c.is_dir()}
    return frozenset({*role, "model", *subgroups})  # a generated option: its model, and its slots (``ua/persona``)


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
            keys |= _node_keys(node)
            targets.append(str(node.get("_target_", "")))
        keys |= {child.name for child in (d / group).iterdir() if child.is_dir()} if (d / group).is_dir() else set()
    keys |= set(_path_keys(config_dirs, [group]))  # what the presets (and the primary configs) set under it
    return keys, tuple(t for t in targets if t)


def _options(group_dir: Traversable) -> Iterator[dict[str, Any] | None]:
    """The nodes of the option files of a group dir (None for one packaged under another key)."""
    if group_dir.is_dir():
        yield from _options_of(group_dir.iterdir())


def _options_of(files: Iterable[Traversable]) -> Iterator[dict[str, Any] | None]:
    """The nodes of option files (None for one packaged under another key)."""
    for f in files:
        if f.name.endswith(".yaml"):
            parsed = config_file(f)
            packaged = "@package" in parsed.header and "_group_" not in parsed.header
            yield None if packaged else dict(parsed.node)


def _node_keys(node: Mapping[str, Any]) -> set[str]:
    """The keys an option file gives its node: its own and those its defaults list fills."""
    return {str(k) for k in node if k != "defaults"} | set(_defaults_keys(node.get("defaults")))


def _defaults_keys(defaults: Any) -> Iterator[str]:
    """The keys a defaults list fills: ``/model@model: x`` fills ``model``, ``provider: x`` fills ``provider``."""
    for entry in defaults if isinstance(defaults, list) else ():
        if isinstance(entry, dict):
            for k in entry:
                path = str(k).removeprefix("override ").strip()
                yield path.rpartition("@")[2].split(".")[0] if "@" in path else path.strip("/").split("/")[-1]


def _path_keys(config_dirs: tuple[Traversable, ...], path: list[str]) -> Iterator[str]:
    """The keys the ``_global_`` files (and the primary configs) set at the dotted ``path``, in a node or a package."""
    dotted = ".".join(path)
    for node in (*(p.node for p in preset_nodes(config_dirs)), *primary_nodes(config_dirs)):
        part: Any = node
        for step in path:
            part = part.get(step) if isinstance(part, dict) else None
        if isinstance(part, dict):
            yield from (str(k) for k in part)
        for package in defaults_packages(node):  # ``override /model@search.model: x`` fills search.model
            if package.startswith(f"{dotted}."):
                yield package[len(dotted) + 1 :].split(".", 1)[0]


def _accepted(targets: tuple[str, ...]) -> tuple[set[str], bool]:
    """The config keys the components ``targets`` take (by their signatures), and whether those are all of them.

    False: a target takes ``**kwargs`` or cannot be loaded (the pre-flight says so), so any key may be taken.
    """
    from cts.compose.checks import accepted_keys

    found: set[str] = set()
    every = True
    for target in targets:
        try:
            keys = accepted_keys(target)
        except (ImportError, AttributeError, ValueError, TypeError):
            keys = None
        found |= keys or set()
        every = every and keys is not None
    return found, every
