"""How a schema declares one config key: its type and bounds, its meaning, protocol or operational.

A schema is a dataclass whose fields are the keys of one config node; each field's type
says what the value is (``int | None``, ``Literal["run", "stop"]``, a nested schema) and
:func:`key` adds what a type cannot say: the bounds, a one-line meaning and whether the
key changes what a job measures (protocol: part of the fingerprint) or only where and how
fast it runs (operational). :func:`keys_of` reads a schema into :class:`KeyInfo` rows, the
one table the value checks, the fingerprint and the guide's key reference are derived from.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

__all__ = ["UNSET", "Check", "KeyInfo", "default_of", "integer", "key", "keys_of", "node_from", "number", "one_of"]


_T = TypeVar("_T")


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""A key with no value that is left out of the fingerprint (see :func:`key`'s ``omit_at``)."""
_META = "cts"


@dataclass(frozen=True)
class Check:
    """What a value must be: a test and the words of the refusal (``an integer >= 1``)."""

    test: Callable[[Any], bool]
    expect: str


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """A finite int or float (not a bool)."""
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def integer(lo: int, hi: int | None = None, *, null: bool = False) -> Check:
    """An integer in ``lo..hi`` (``hi`` None = no upper bound), or None when ``null``."""

    def test(v: Any) -> bool:
        return (null and v is None) or (_is_int(v) and v >= lo and (hi is None or v <= hi))

    text = f"an integer >= {lo}" if hi is None else f"an integer from {lo} to {hi}"
    return Check(test, text + (" or null" if null else ""))


def number(
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    null: bool = False,
) -> Check:
    """A finite number within the given bounds, or None when ``null``."""
    bounds = [
        (">=", ge, lambda v, b: v >= b),
        (">", gt, lambda v, b: v > b),
        ("<=", le, lambda v, b: v <= b),
        ("<", lt, lambda v, b: v < b),
    ]
    used = [(op, b, f) for op, b, f in bounds if b is not None]

    def test(v: Any) -> bool:
        return (null and v is None) or (is_number(v) and all(f(v, b) for _, b, f in used))

    text = "a number " + " and ".join(f"{op} {b:g}" for op, b, _ in used) if used else "a number"
    return Check(test, text + (" or null" if null else ""))


def one_of(*choices: Any) -> Check:
    """One of ``choices`` (compared with ``==``, booleans only with booleans)."""

    def test(v: Any) -> bool:
        return any(type(v) is type(c) and v == c for c in choices)

    return Check(test, "one of " + ", ".join(str(c).lower() if isinstance(c, bool) else str(c) for c in choices))


@dataclass(frozen=True)
class _Meta:
    meaning: str
    protocol: bool
    bounds: dict[str, float]
    check: Check | None
    omit_at: Any


def key(
    meaning: str,
    default: Any = dataclasses.MISSING,
    *,
    protocol: bool = True,
    check: Check | None = None,
    omit_at: Any = UNSET,
    **bounds: float,
) -> Any:
    """One schema field: a config key's meaning, default, bounds and part in the protocol.

    Args:
        meaning: One line: what the key means (the refusal and the guide's reference say it).
        default: The key's default, written here only: the yaml under ``conf/`` holds the same
            value (``python -m cts.compose.schema`` writes a missing one; a test compares them)
            and the library's dataclasses read it from here. A nested schema (a class) stands
            for its own fields' defaults. Omitted for a key whose value is an option's (a
            model file, a search, a launcher): the option's yaml is its only declaration.
        protocol: Whether the key changes what a job measures: a protocol key is part of the
            fingerprint (a changed value refuses a resume), an operational one is not.
        check: A test the type and bounds cannot say (replaces them).
        omit_at: A protocol key added after job dirs existed: at this value it is left out of
            the fingerprint, so a dir written before the key resumes.
        **bounds: ``ge`` (lower bound, inclusive), ``gt``, ``le``, ``lt`` of a number.
    """
    unknown = set(bounds) - {"ge", "gt", "le", "lt"}
    if unknown:
        raise TypeError(f"key() got unknown bounds {sorted(unknown)}")
    meta = {_META: _Meta(meaning, protocol, dict(bounds), check, omit_at)}
    if isinstance(default, type) and dataclasses.is_dataclass(default):
        return field(default_factory=default, metadata=meta)
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def default_of(schema: type, path: str) -> Any:
    """The declared default of the dotted ``path`` inside ``schema`` (``"backoff.max"`` of :class:`LLM`).

    Raises:
        LookupError: The key has no default (its value is an option's).
    """
    head, _, rest = path.partition(".")
    f = {f.name: f for f in dataclasses.fields(schema)}[head]
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        raise LookupError(f"{schema.__name__}.{head} declares no default")
    if not rest:
        return value
    return default_of(type(value), rest)


@dataclass(frozen=True)
class KeyInfo:
    """One declared key, as the value checks, the fingerprint and the guide read it.

    Attributes:
        path: Dotted path pattern: ``*`` is one key (a list index too), ``**`` any number of keys.
        meaning: What the key means.
        protocol: Part of the fingerprint (else operational).
        check: What a value must be (None: any value).
        omit_at: The value at which a protocol key is left out of the fingerprint (else :data:`UNSET`).
        type_name: The field's type as the guide shows it.
        branch: Whether the key holds a node (a nested schema, a mapping or a list).
        node: The nested schema of a node key (its ``ORDER`` pairs are checked too), else None.
        default: The declared default of a leaf key (else :data:`UNSET`: a node, or an option's value).
    """

    path: str
    meaning: str
    protocol: bool = True
    check: Check | None = None
    omit_at: Any = UNSET
    type_name: str = ""
    branch: bool = False
    node: type | None = None
    default: Any = UNSET


def keys_of(schema: type, mount: str = "") -> Iterator[KeyInfo]:
    """Every key of ``schema`` mounted at the dotted pattern ``mount``, nested schemas' keys after their node."""
    hints = typing.get_type_hints(schema, include_extras=False)
    for f in dataclasses.fields(schema):
        meta: _Meta = f.metadata[_META]
        path = f"{mount}.{f.name}" if mount else f.name
        hint = hints[f.name]
        inner, null = _without_none(hint)
        nested = inner if dataclasses.is_dataclass(inner) and isinstance(inner, type) else None
        item = _item_type(inner)
        check = meta.check or (None if nested or item else _check_of(inner, null, meta.bounds))
        name = _type_name(hint)
        default = UNSET if nested else _default(f)
        yield KeyInfo(
            path, meta.meaning, meta.protocol, check, meta.omit_at, name, bool(nested or item), nested, default
        )
        if nested is not None:
            yield from keys_of(nested, path)
        elif item is not None:
            yield from _items(item, f"{path}.*", meta)


def node_from(schema: type[_T], data: Mapping[str, Any] | None, where: str) -> _T:
    """``data`` (a config node) as a ``schema`` instance: nested schemas built alike, a missing key at its default.

    Args:
        schema: The node's schema (or a library subclass of it that adds methods).
        data: The node's plain values (None: every default).
        where: The node's dotted path, for the messages.

    Raises:
        ValueError: A key the schema does not declare (a typo), or a node that is not a mapping.
    """
    if not isinstance(data, Mapping | None):
        raise ValueError(f"{where} must be a mapping, got {data!r}")  # noqa: TRY004 - a config error, as the others
    values = dict(data or {})
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(schema)})  # type: ignore[arg-type]  # schema is a dataclass type, typed as type
    if unknown:
        raise ValueError(f"unknown {where} keys: {unknown}")
    hints = typing.get_type_hints(schema)
    for name, value in list(values.items()):
        inner, null = _without_none(hints[name])
        if not (dataclasses.is_dataclass(inner) and isinstance(inner, type)):
            continue
        if value is None and not null:
            del values[name]  # an empty node: its defaults
        elif value is not None:
            values[name] = node_from(inner, value, f"{where}.{name}")
    return schema(**values)


def _default(f: dataclasses.Field[Any]) -> Any:
    """The field's declared default (a fresh copy of a list or mapping), else :data:`UNSET`."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return UNSET


def _items(item: Any, path: str, meta: _Meta) -> Iterator[KeyInfo]:
    """The keys of a mapping's or list's items (``path`` ends in ``*``)."""
    inner, null = _without_none(item)
    if dataclasses.is_dataclass(inner) and isinstance(inner, type):
        yield KeyInfo(path, meta.meaning, meta.protocol, meta.check, UNSET, "node", True, inner)
        yield from keys_of(inner, path)
    else:
        check = meta.check or _check_of(inner, null, meta.bounds)
        yield KeyInfo(path, meta.meaning, meta.protocol, check, UNSET, _type_name(item))


def _without_none(hint: Any) -> tuple[Any, bool]:
    """``hint`` without ``None`` and whether it allowed None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), len(args) < len(typing.get_args(hint))  # noqa: UP007
    return hint, False


def _item_type(hint: Any) -> Any:
    """The item type of ``dict[str, X]`` or ``list[X]``, else None."""
    origin = typing.get_origin(hint)
    if origin is dict:
        return typing.get_args(hint)[1]
    if origin is list:
        return typing.get_args(hint)[0]
    return None


def _check_of(hint: Any, null: bool, bounds: dict[str, float]) -> Check | None:
    """The check a scalar type and its bounds say (None: str, Any and the like take any value)."""
    if hint is bool:
        return one_of(True, False) if not null else Check(lambda v: v is None or isinstance(v, bool), "a bool or null")
    if hint is int:
        lo = int(bounds.get("ge", bounds.get("gt", -1) + 1))
        hi = bounds.get("le")
        return integer(lo, None if hi is None else int(hi), null=null)
    if hint is float:
        return number(null=null, **bounds)
    if typing.get_origin(hint) is Literal:
        return one_of(*typing.get_args(hint))
    return None


def _type_name(hint: Any) -> str:
    """``int | None``, ``float``, ``'run' | 'stop'``: the type as the guide writes it."""
    inner, null = _without_none(hint)
    if typing.get_origin(inner) is Literal:
        text = " | ".join(repr(a) for a in typing.get_args(inner))
    elif dataclasses.is_dataclass(inner) and isinstance(inner, type):
        text = "node"
    elif typing.get_origin(inner) in (dict, list):
        text = f"{typing.get_origin(inner).__name__}[{', '.join(_type_name(a) for a in typing.get_args(inner))}]"
    else:
        text = getattr(inner, "__name__", str(inner).replace("typing.", ""))
    return f"{text} | None" if null else text
