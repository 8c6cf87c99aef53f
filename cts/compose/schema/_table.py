"""The declared keys of every schema, where they are mounted, and what is derived from them.

:data:`KEYS` is the one table: :mod:`cts.compose.validate` refuses the values it bounds,
:func:`protocol_part` leaves its operational keys out of the fingerprint, and
:func:`reference` writes the guide's key reference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cts.compose.schema._components import MOUNTS_OF_COMPONENTS
from cts.compose.schema._keys import UNSET, KeyInfo, keys_of
from cts.compose.schema._run import Config

MOUNTS: tuple[tuple[str, type], ...] = (("", Config), *MOUNTS_OF_COMPONENTS)
"""Each schema and the dotted pattern it is bound at, the most specific first (a key's first match wins)."""

KEYS: tuple[KeyInfo, ...] = tuple(k for mount, schema in MOUNTS for k in keys_of(schema, mount))
"""Every declared key, in :data:`MOUNTS` order."""


def declared() -> tuple[KeyInfo, ...]:
    """:data:`KEYS` as it is now (what the checks and the fingerprint read; a test may declare a key of its own)."""
    return KEYS


def ordered(keys: tuple[KeyInfo, ...]) -> tuple[tuple[str, str, str], ...]:
    """Sibling keys whose values must not cross: ``(parent pattern, low, high)`` means ``low <= high``.

    A schema's ``ORDER`` pairs, wherever it is mounted or nested.
    """
    return (
        *((mount, low, high) for mount, schema in MOUNTS if mount for low, high in getattr(schema, "ORDER", ())),
        *((k.path, low, high) for k in keys if k.node is not None for low, high in getattr(k.node, "ORDER", ())),
    )


ORDERED = ordered(KEYS)
"""The order constraints of the shipped schemas (see :func:`ordered`)."""


def operational_top() -> tuple[str, ...]:
    """The top-level keys left out of the fingerprint whole (masked before the config is resolved)."""
    return tuple(k.path for k in KEYS if "." not in k.path and "*" not in k.path and not k.protocol)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A regex of a dotted path pattern: ``*`` is one key, ``**`` any number of keys (none too)."""
    parts = pattern.split(".")
    out = []
    for i, part in enumerate(parts):
        dot = r"\." if i < len(parts) - 1 else ""
        out.append(r"(?:[^.]+\.)*" if part == "**" else (r"[^.]+" if part == "*" else re.escape(part)) + dot)
    return re.compile("".join(out) + "$")


_found: dict[str, KeyInfo | None] = {}
_compiled: list[Any] = [None, ()]  # the KEYS the patterns were compiled from, and the patterns


def key_at(path: str) -> KeyInfo | None:
    """The declared key a dotted config path is (the first of :data:`KEYS` that matches), else None."""
    if _compiled[0] is not KEYS:  # compiled once per table (a test may declare a key of its own)
        _compiled[:] = [KEYS, tuple((compile_pattern(k.path), k) for k in KEYS)]
        _found.clear()
    if path not in _found:
        _found[path] = next((k for pattern, k in _compiled[1] if pattern.match(path)), None)
    return _found[path]


def protocol_part(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a resolved config) without its operational keys, nor protocol keys at their ``omit_at`` value.

    A key no schema declares is kept: what is not said to be operational counts as protocol.
    """
    kept = _kept(data, "")
    assert isinstance(kept, dict)
    return kept


def _kept(node: Any, prefix: str) -> Any:
    if isinstance(node, Mapping):
        out = {}
        for name, value in node.items():
            info = key_at(f"{prefix}{name}")
            if info is not None and (not info.protocol or (info.omit_at is not UNSET and value == info.omit_at)):
                continue
            out[name] = _kept(value, f"{prefix}{name}.")
        return out
    if isinstance(node, list):
        return [_kept(value, f"{prefix}{i}.") for i, value in enumerate(node)]
    return node


def reference() -> str:
    """The guide's key reference: one Markdown row per declared key (``python -m cts.compose.schema`` writes it)."""
    rows = ["| key | type | default | bounds | fingerprint | meaning |", "|---|---|---|---|---|---|"]
    for k in KEYS:
        if k.path.endswith("*") and k.check is None and not k.branch:
            continue  # the items of a list of names: their node's row says it
        bounds = k.check.expect if k.check is not None else ""
        part = "protocol" if k.protocol else "operational"
        if k.omit_at is not UNSET:
            part += f" (left out at `{_shown(k.omit_at)}`)"
        default = "" if k.default is UNSET else f"`{_shown(k.default)}`"
        rows.append(f"| `{k.path}` | {_cell(k.type_name)} | {_cell(default)} | {bounds} | {part} | {k.meaning} |")
    return "\n".join(rows) + "\n"


BEGIN, END = "<!-- keys: python -m cts.compose.schema -->", "<!-- end of keys -->"
"""The markers around the key reference in ``docs/reference.md``."""


def with_reference(text: str) -> str:
    """``text`` (docs/reference.md) with the part between :data:`BEGIN` and :data:`END` replaced by :func:`reference`."""
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the page has no {BEGIN} ... {END} block")
    return f"{head}{BEGIN}\n{reference()}{END}{tail}"


def _shown(value: Any) -> str:
    """``value`` as the yaml writes it (``null``, ``true``, ``[]``, ``{ua: 60.0}``)."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _cell(text: str) -> str:
    return text.replace("|", "&#124;")
