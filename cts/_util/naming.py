"""Job names (sweep sub-dirs, MLflow run names) from the swept factors only.

Hydra's default ``override_dirname`` joins every override, so routing and paths
(``services.llm.api_base=http://...``, an absolute ``dataset.gold_path``) end up in
the name and their slashes nest directories. A job is named by the factors the
sweep varies (``clarifier=gpt,k=2``); every other setting stays in the params.

The launching process knows which overrides are sweeps; it records their keys with the
sweep (:mod:`cts._util.launch`), and every job, in-process or in a launcher's worker,
reads them back when its sub-dir is resolved (resolver ``cts_job_name``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from omegaconf import OmegaConf

__all__ = [
    "CLARIFIER_MODEL",
    "RESOLVER",
    "factors",
    "job_name",
    "override_items",
    "register_resolver",
    "swept_keys",
    "system_name",
]

RESOLVER = "cts_job_name"
_UNSAFE = re.compile(r"[^\w.,=+\-@]")  # \w keeps CJK; drops path separators, ':' and quotes
_MAX_LEN = 120


def _parse(overrides: Sequence[str]) -> list:  # list[hydra Override]
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides([str(o) for o in overrides])


def _value(override: Any) -> str:
    value = override.value()
    if isinstance(value, (str, int, float)):
        return str(value)
    # A sweep (``k=1,2``) has no value of its own yet: it is kept as written.
    return str(override.get_value_string() if override.is_sweep_override() else override.get_value_element_as_str())


def override_items(overrides: Sequence[str]) -> list[tuple[str, str]]:
    """``(key, value)`` of each override, in order, parsed by Hydra's ``OverridesParser``.

    The key is as written (``+x``, ``~x``, ``model@clarifier.model``); the value is Hydra's
    (quotes and escapes undone: ``$\\{oc.env\\:K\\}`` is ``${oc.env:K}``; ``null`` for none).

    Raises:
        hydra.errors.OverrideParseException: an override is not valid Hydra syntax.
    """
    return list(_items(tuple(str(o) for o in overrides)))


@functools.lru_cache(maxsize=4096)
def _items(overrides: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """:func:`override_items` of one command line, parsed once: a job's name, factors and params all read it."""
    return tuple((o.get_key_element(), _value(o)) for o in _parse(overrides))


def factors(overrides: Sequence[str], swept: Collection[str] | None = None) -> dict[str, str]:
    """The factors a job's overrides set: ``{key: value}``, the key without its ``+``/``~`` prefix.

    Args:
        overrides: The job's overrides (``hydra.overrides.task``: sweeps already expanded).
        swept: Keys the sweep varies, as :func:`swept_keys` gives them (None: every override).
    """
    return {key.lstrip("+~"): value for key, value in override_items(overrides) if swept is None or key in swept}


def swept_keys(overrides: Sequence[str]) -> tuple[str, ...]:
    """Keys of the command-line overrides that sweep (``k=1,2``, ``range(...)``, ``choice(...)``)."""
    return _swept(tuple(str(o) for o in overrides))


@functools.lru_cache(maxsize=256)
def _swept(overrides: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(o.get_key_element() for o in _parse(overrides) if o.is_sweep_override())


def _safe(text: str) -> str:
    safe = _UNSAFE.sub("_", text)
    if len(safe) <= _MAX_LEN:
        return safe
    return f"{safe[: _MAX_LEN - 13]}_{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def job_name(overrides: Sequence[str], swept: Collection[str] | None, fallback: str = "") -> str:
    """``key=value`` of the job's swept overrides, sorted and joined by ``,``; one path segment.

    Args:
        overrides: The job's own overrides (sweeps already expanded).
        swept: Keys the sweep varies (None = unknown: every override is used, made path-safe).
        fallback: The name when nothing is swept.
    """
    items = [f"{key}={value}" for key, value in override_items(overrides) if swept is None or key in swept]
    return _safe(",".join(sorted(items))) if items else fallback


CLARIFIER_MODEL = "model@clarifier.model"
"""The override that rebinds the clarifier's model: ``clarifier=gpt model@clarifier.model=claude`` is ``claude``."""


def system_name(choices: Mapping[str, str], swept: Mapping[str, str]) -> str:
    """A job's system: what the report names its rows by, the MLflow tag ``cts.system`` and the analyses.

    The clarifier's model when a swept override rebinds it (:data:`CLARIFIER_MODEL`), else the
    clarifier option (``rules_scope``, ``gpt``; ``none`` plays the orig arm). Never k, a mode or a setting.

    Args:
        choices: The job's config group choices (Hydra's ``runtime.choices``).
        swept: The job's swept factors, as :func:`factors` gives them.
    """
    return swept.get(CLARIFIER_MODEL) or choices.get("clarifier") or swept.get("clarifier") or "unknown"


def _resolve_job_name(overrides: Sequence[str], num: int | str = 0, sweep_dir: str = "") -> str:
    from cts._util.launch import swept_keys_of

    return job_name(list(overrides), swept_keys_of(str(sweep_dir)), fallback=f"job{num}")


def register_resolver() -> None:
    """Register ``${cts_job_name:<overrides>,<job num>,<sweep dir>}`` (idempotent)."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, _resolve_job_name)
