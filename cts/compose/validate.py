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

import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from omegaconf import DictConfig, ListConfig, OmegaConf

from cts.compose.schema import KEYS, ORDERED, KeyInfo, compile_pattern, declared, ordered
from cts.compose.schema._keys import is_number

__all__ = ["ORDERED", "RULES", "Rule", "compile_pattern", "register_resolvers", "value_problems"]

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
