"""The values a run is refused for before anything is created: the bounds the schemas declare.

Every number a user can mistype is checked against :data:`RULES`, derived from the typed
schemas of :mod:`cts.compose.schema` (config path pattern, what the value must be, what the
key means), so ``k=7``, ``concurrency=0`` or ``limit=-1`` end with one
``error:`` line each and exit 1 before the MLflow store, a run dir or a sweep dir exists,
instead of hanging, running unscored or slicing the dataset (the Hydra callback calls
:func:`cts.compose.app.check_start`). The places a run writes are checked by :mod:`cts.compose.checks`.
The default run dir ends in the process id (resolver ``cts_pid``), so runs started in the
same second never share it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from typing import Any, TypeGuard

from omegaconf import DictConfig, ListConfig, OmegaConf

from cts.compose.presets import preset_nodes
from cts.compose.quoting import unquoted_text_problem
from cts.compose.schema import CLOSED, KEYS, ORDERED, Config, KeyInfo, compile_pattern, declared, key_at, ordered
from cts.compose.schema._keys import is_number
from cts.core.stages import stages

__all__ = [
    "ORDERED",
    "RULES",
    "Rule",
    "appended_key_problems",
    "command_line_problems",
    "compile_pattern",
    "declared_names",
    "no_such_key",
    "register_resolvers",
    "value_problems",
]

PID_RESOLVER = "cts_pid"


def register_resolvers() -> None:
    """Register ``${cts_pid:}`` (this process's id: the default run dir's suffix, see ``conf/config.yaml``)."""
    if not OmegaConf.has_resolver(PID_RESOLVER):
        OmegaConf.register_new_resolver(PID_RESOLVER, os.getpid)


register_resolvers()  # whoever composes a config that names the run dir has imported this module or run.py


@dataclass(frozen=True)
class Rule:
    """What the values at some config paths must be (one declared key of :mod:`cts.compose.schema`).

    Attributes:
        patterns: Dotted config paths; ``*`` is one key (a list index too), ``**`` any number of keys.
        check: True when a (resolved) value is acceptable.
        expect: What the value must be, as said in the message (``an integer >= 1``).
        why: What the key means.
    """

    patterns: tuple[str, ...]
    check: Callable[[Any], bool]
    expect: str
    why: str = ""


def rules_of(keys: tuple[KeyInfo, ...]) -> tuple[Rule, ...]:
    """The value table of declared ``keys``: one rule per key a schema bounds."""
    return tuple(Rule((k.path,), k.check.test, k.check.expect, k.meaning) for k in keys if k.check)


RULES: tuple[Rule, ...] = rules_of(KEYS)
"""The value table: every key a schema bounds, wherever it is mounted (derived from :data:`cts.compose.schema.KEYS`)."""


Compiled = list[tuple[re.Pattern[str], Rule]]


def _index(rules: Sequence[Rule]) -> tuple[dict[str, Compiled], Compiled]:
    """The rules by their pattern's last key (most patterns end in one), and those ending in a wildcard."""
    by_key: dict[str, Compiled] = {}
    wild: Compiled = []
    for r in rules:
        for p in r.patterns:
            last = p.rsplit(".", 1)[-1]
            (wild if "*" in last else by_key.setdefault(last, [])).append((compile_pattern(p), r))
    return by_key, wild


Tables = tuple[dict[str, Compiled], Compiled, tuple[tuple[re.Pattern[str], str, str], ...]]
_tables: list[Any] = [None, None]  # the declared keys, and the tables compiled from them


def _tables_of(keys: tuple[KeyInfo, ...]) -> Tables:
    """The rules by key, the wildcard rules and the order constraints of ``keys`` (compiled once per table)."""
    if _tables[0] is not keys:
        by_key, wild = _index(rules_of(keys))
        orders = tuple((compile_pattern(f"{parent}.{low}"), low, high) for parent, low, high in ordered(keys))
        _tables[:] = [keys, (by_key, wild, orders)]
    tables: Tables = _tables[1]
    return tables


def leaves(node: DictConfig | ListConfig, prefix: str = "") -> Iterator[tuple[str, DictConfig | ListConfig, Any]]:
    """Every leaf of a config tree as ``(dotted path, parent node, key)``, without resolving anything."""
    keys: Iterable[Any] = list(node.keys()) if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        child = node._get_node(key)
        if _is_branch(child):
            yield from leaves(child, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", node, key


def _is_branch(node: Any) -> TypeGuard[DictConfig | ListConfig]:
    return isinstance(node, (DictConfig, ListConfig)) and not (
        node._is_none() or node._is_missing() or node._is_interpolation()
    )


def _value(parent: DictConfig | ListConfig, key: Any) -> tuple[bool, Any]:
    """``(True, value)`` when the leaf resolves; ``(False, None)`` when it is ``???`` or fails (reported elsewhere)."""
    if isinstance(parent, DictConfig) and OmegaConf.is_missing(parent, key):
        return False, None
    try:
        value = parent[key]
        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value, resolve=True)
    except Exception:  # noqa: BLE001 - an unset env var or a ${hydra:} outside Hydra: input_errors says so
        return False, None
    return True, value


def value_problems(cfg: DictConfig) -> list[str]:
    """One ``path: must be ..., got ...`` line per value of ``cfg`` that :data:`RULES` or :data:`ORDERED` refuses."""
    problems: dict[str, str] = {}
    values: dict[str, Any] = {}
    by_key, wild, orders = _tables_of(declared())
    for path, parent, key in _checked_leaves(cfg):
        rules = [r for pattern, r in (*by_key.get(str(key), ()), *wild) if pattern.match(path)]
        ok, value = _value(parent, key) if rules else (False, None)
        if not ok:
            continue
        values[path] = value
        failed = next((r for r in rules if not r.check(value)), None)
        if failed is not None:
            why = f" ({failed.why})" if failed.why else ""
            problems[path] = f"{path}: must be {failed.expect}{why}, got {_shown(value)}"
    for path, value in values.items():
        for pattern, low, high in orders:
            other = path[: -len(low)] + high
            if (
                pattern.match(path)
                and other in values
                and not ({path, other} & set(problems))
                and is_number(value)
                and is_number(values[other])
                and value > values[other]
            ):
                problems[path] = f"{path}: must be <= {other} ({_shown(values[other])}), got {_shown(value)}"
    return list(problems.values())


def _checked_leaves(cfg: DictConfig) -> Iterator[tuple[str, DictConfig | ListConfig, Any]]:
    """Leaves outside ``hydra``, plus those of ``hydra.launcher`` (the only Hydra settings in the table)."""
    for key in [str(k) for k in cfg if k != "hydra"]:
        if _is_branch(node := cfg._get_node(key)):
            yield from leaves(node, f"{key}.")
        else:
            yield str(key), cfg, key
    launcher = OmegaConf.select(cfg, "hydra.launcher", default=None)
    if isinstance(launcher, DictConfig):
        yield from leaves(launcher, "hydra.launcher.")


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


def no_such_key(key: str, known: Iterable[str], *, listed: bool = False) -> str:
    """The line of a key nothing declares: ``concurency: no such key (did you mean concurrency?)``.

    Args:
        listed: Without a close match, list the ``known`` keys (a component's few) instead of pointing at the guide.
    """
    head, dot, rest = key.rpartition(".")
    names = sorted({k for k in known if not k.startswith("_")})
    found = difflib.get_close_matches(rest, names, n=1, cutoff=0.7)
    hint = f"did you mean {head}{dot}{found[0]}?" if found else "the keys are in the guide's key reference"
    if listed and not found:
        hint = f"{head}'s options take: {', '.join(names)}"
    return f"{key}: no such key ({hint})"


def declared_names(parent: str) -> list[str]:
    """The keys a schema declares in the node at dotted path ``parent`` ("" is the root; [] when none does)."""
    info = key_at(parent) if parent else None
    schema = Config if not parent else (info.node if info is not None else None)
    return [f.name for f in dataclasses.fields(schema)] if schema is not None else []


def command_line_problems(
    args: Sequence[str], config_dirs: Sequence[Traversable], model_groups: Collection[str] = ()
) -> list[str]:
    """One line per override of ``args`` whose first key nothing defines, or whose group has no such option.

    Checked before Hydra composes anything, so ``concurency=1``, ``+concurency=1``,
    ``clarifier=rules_regio`` or an unquoted CJK value (``tracking.experiment=中文``,
    :mod:`cts.compose.quoting`) ends with one ``error:`` line and creates no dir. Known first keys: the
    root schema's (:class:`cts.compose.schema.Config`), the config groups of ``config_dirs``, and the
    keys their ``_global_`` presets add (``build_gold``); deeper keys where the schemas on their path
    declare every key (:data:`CLOSED`); a component's (``clarifier.treshold``) by
    :func:`cts.compose.component_keys.component_key_problems`. The others are checked on the composed
    config (:func:`appended_key_problems`, the pre-flight).

    Args:
        args: The command line's arguments.
        config_dirs: The config dirs (``conf/`` and the command line's own).
        model_groups: The groups every ``model/<name>.yaml`` is also an option of (the LLM roles).
    """
    problems = [line for arg in args if (line := unquoted_text_problem(arg)) is not None]
    keys = [(arg, k) for arg in args if (k := _override_key(arg)) is not None]
    if not keys:
        return problems
    known = _first_keys(config_dirs)
    for arg, key in keys:
        group = key.replace(".", "/")
        if any((d / group).is_dir() for d in config_dirs):
            problems += _option_problems(arg, group, config_dirs, model_groups)
        elif key.split(".", 1)[0].split("/", 1)[0] not in known:
            problems.append(no_such_key(key, known))
        elif (found := _closed_path_problem(key)) is not None:
            problems.append(found)
    return problems


def _closed_path_problem(key: str) -> str | None:
    """The line of a dotted key that goes through closed schemas (:data:`CLOSED`) to a key they lack, else None."""
    parts = key.split(".")
    for i in range(1, len(parts)):
        info = key_at(".".join(parts[:i]))
        if info is None or info.node not in CLOSED:
            return None  # a component, an open node or a mapping: the pre-flight or Hydra checks it
        names = [f.name for f in dataclasses.fields(info.node)]
        if parts[i] not in names:
            return no_such_key(".".join(parts[: i + 1]), names)
    return None


def _option_problems(
    arg: str, group: str, config_dirs: Sequence[Traversable], model_groups: Collection[str]
) -> list[str]:
    """``group=option`` lines for each option of ``arg`` (its swept values too) that the group has no file for."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep
    from hydra.errors import HydraException

    try:
        override = OverridesParser.create().parse_override(arg.lstrip("+"))
    except HydraException:
        return []  # Hydra says what is malformed
    value = override.value()
    if isinstance(value, ChoiceSweep):
        wanted = [str(v) for v in value.list if isinstance(v, str)]
    else:
        wanted = [value] if isinstance(value, str) and not override.is_sweep_override() else []
    options = {
        f.name[: -len(".yaml")]
        for d in config_dirs
        for sub in (d / group, *((d / "model",) if group in model_groups else ()))
        if sub.is_dir()
        for f in sub.iterdir()
        if f.name.endswith(".yaml")
    }
    name = group.replace("/", ".")
    return [_no_such_option(name, o, options) for o in wanted if o not in options and o != "null"]


def _no_such_option(group: str, option: str, options: Collection[str]) -> str:
    close = difflib.get_close_matches(option, sorted(options), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    return f"{group}={option}: no such option ({hint}options: {', '.join(sorted(options))})"


def _override_key(arg: str) -> str | None:
    """The key of a ``key=value``, ``+key=value`` or ``++key=value`` override (None: a flag, a delete, a package)."""
    if arg.startswith(("-", "~")) or "=" not in arg:
        return None
    key = arg.split("=", 1)[0].lstrip("+")
    return None if not key or "@" in key or key.startswith("hydra") else key


def _first_keys(config_dirs: Sequence[Traversable]) -> set[str]:
    """The root schema's keys, the declared stages' roles, the config groups and the ``_global_`` presets' keys."""
    known = {f.name for f in dataclasses.fields(Config)} | {s.role for s in stages()}
    known |= {child.name for d in config_dirs for child in d.iterdir() if child.is_dir()}
    presets = (p.node for p in preset_nodes(tuple(config_dirs)) if p.in_group)
    return known | {str(k) for node in presets for k in node if k != "defaults"}


def appended_key_problems(cfg: DictConfig) -> list[str]:
    """One line per ``+key=value`` of the job's command line that lands where a schema declares no such key.

    ``+concurency=1`` would be stored silently (and change the fingerprint for nothing). A key added
    to a component (a node with ``_target_``) is checked against its signature by the pre-flight;
    a key under a node no schema describes (``paths``, a preset's own) is left alone.
    """
    overrides = OmegaConf.select(cfg, "hydra.overrides.task", default=None) or []
    groups = {str(g).split("@", 1)[0] for g in OmegaConf.select(cfg, "hydra.runtime.choices", default=None) or {}}
    problems = []
    for arg in (str(o) for o in overrides if str(o).startswith("+")):
        key = _override_key(arg)
        if key is None or key.replace(".", "/") in groups:
            continue
        parent_path, _, name = key.rpartition(".")
        schema = _schema_of(cfg, parent_path)
        if schema is not None and name not in (fields := {f.name for f in dataclasses.fields(schema)}):
            problems.append(no_such_key(key, fields))
    return problems


def _schema_of(cfg: DictConfig, path: str) -> type | None:
    """The schema of the node at ``path`` when it declares every key there (None: a component, an open node, none)."""
    node = OmegaConf.select(cfg, path, default=None) if path else cfg
    if not isinstance(node, DictConfig) or "_target_" in node:
        return None
    if not path:
        return Config
    info = key_at(path)
    return info.node if info is not None and info.node in CLOSED else None
