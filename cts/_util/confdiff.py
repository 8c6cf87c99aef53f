"""Which configuration keys differ between two resolved configs (for refused resumes)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["config_diff", "flat_items"]

_MISSING = object()


def flat_items(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings into ``{"a.b.c": value}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat_items(value, f"{name}."))
        else:
            out[name] = value
    return out


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any], limit: int = 20) -> list[str]:
    """One ``key: old -> new`` line per differing leaf key, sorted, at most ``limit`` lines.

    Args:
        old: The resolved config the job dir's records came from.
        new: The resolved config of this run.
        limit: Lines shown; a last line counts the rest.
    """
    a, b = flat_items(old), flat_items(new)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k, _MISSING) != b.get(k, _MISSING))
    lines = [f"{k}: {_show(a.get(k, _MISSING))} -> {_show(b.get(k, _MISSING))}" for k in keys[:limit]]
    if len(keys) > limit:
        lines.append(f"... and {len(keys) - limit} more key(s)")
    return lines
