"""Config nodes a bare value switches on: ``plan=true`` is ``plan.enabled=true``, ``plan=only`` adds ``plan.then=stop``.

Hydra applies ``plan=true`` by replacing the whole ``plan`` node with the bool, so a later
``plan.calibration_n=10`` finds no node to go into ("Could not override") and an earlier one
is silently dropped. The entry point (``run.py``) spells each switch out as its ``enabled`` key
before Hydra reads the command line: both spellings then compose the same config, in any
order, and ``plan=maybe`` is refused by the value check (``plan.enabled`` must be a bool).
The compose API sees no command line: pass its overrides through :func:`spell_out_switches`.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["SWITCHES", "spell_out_switches"]

SWITCHES: dict[str, str] = {"plan": "plan.enabled"}
"""Switch key -> the key a bare value of it stands for."""

WORDS: dict[str, dict[str, tuple[str, ...]]] = {"plan": {"only": ("true", "plan.then=stop")}}
"""Switch key -> a word it takes -> the enabled key's value and the overrides it adds (``plan=only``)."""


def _parsed(arg: str) -> tuple[str, str, str] | None:
    """``(key, value as written, value as Hydra reads it)`` of a plain ``key=value`` override, else None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    if arg.startswith("-") or "=" not in arg:
        return None  # a flag of Hydra's own (--config-dir, -m, ...)
    try:
        override = OverridesParser.create().parse_override(arg)
    except HydraException:
        return None  # Hydra reports the malformed override itself
    if override.type != OverrideType.CHANGE or override.package is not None:
        return None
    written = arg.split("=", 1)[1]
    shown = written if override.is_sweep_override() else repr(override.value())
    return override.key_or_group, written, shown


def spell_out_switches(args: Sequence[str]) -> list[str]:
    """``args`` with each ``<switch>=<value>`` written as ``<switch>.enabled=<value>`` (see the module docstring).

    A dict value (``plan={enabled:true}``) merges into the node as Hydra does it, and is kept.

    Raises:
        ValueError: One switch is given different values in its two spellings
            (``plan=true plan.enabled=false``): Hydra would keep the last one silently.
    """
    out: list[str] = []
    seen: dict[str, dict[str, str]] = {}  # enabled key -> value as read -> the override as written
    for arg in args:
        parsed = _parsed(arg)
        if parsed is None or (parsed[0] not in SWITCHES and parsed[0] not in SWITCHES.values()):
            out.append(arg)
            continue
        key, written, shown = parsed
        if key in SWITCHES and written.lstrip().startswith("{"):
            out.append(arg)
            continue
        enabled = SWITCHES.get(key, key)
        value, *added = WORDS.get(key, {}).get(written.strip(), (written,))
        seen.setdefault(enabled, {}).setdefault(repr(True) if added else shown, arg)
        out += [f"{enabled}={value}", *added]
    for enabled, values in seen.items():
        if len(values) > 1:
            raise ValueError(f"{' and '.join(values.values())} contradict each other: give {enabled} once")
    return out
