"""Pre-flight check: can every model in the composed config be reached?

Runs on the composed config before anything is instantiated, without importing
litellm, so a run with missing keys fails within a second or two and names
every missing variable by its config path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

__all__ = ["MODEL_SPEC_TARGET", "find_model_specs", "preflight_problems"]

MODEL_SPEC_TARGET = "cts.llm.ModelSpec"
_SKIP = frozenset({"hydra"})


def find_model_specs(cfg: DictConfig) -> list[tuple[str, DictConfig]]:
    """Every config node whose ``_target_`` is :class:`cts.llm.ModelSpec`.

    Args:
        cfg: The composed config.

    Returns:
        ``(path, node)`` pairs, e.g. ``("clarifier.model", <node>)``, in config order.
    """
    return list(_walk(cfg, ""))


def preflight_problems(cfg: DictConfig) -> list[str]:
    """One message per model that cannot be reached as configured.

    A model is reachable when ``services.llm.api_base`` routes every role to one
    endpoint, or when its key variable (``api_key_env``) is set, or, for keyless
    models, when it has an ``api_base``.

    Args:
        cfg: The composed config.

    Returns:
        Problems such as ``clarifier.model (gpt): OPENAI_API_KEY is not set``; empty when all is well.
    """
    if _value(OmegaConf.select(cfg, "services.llm.api_base", default=None)):
        return []
    problems = []
    for path, node in find_model_specs(cfg):
        name = _value(_get(node, "name")) or "?"
        key_env, api_base = _value(_get(node, "api_key_env")), _value(_get(node, "api_base"))
        if key_env and not os.environ.get(key_env):
            problems.append(f"{path} ({name}): {key_env} is not set")
        elif not key_env and not api_base:
            env = _env_name(node, "api_base")
            hint = f"{env} is not set" if env else "no api_base and no key variable (set the model's api_base)"
            problems.append(f"{path} ({name}): {hint}")
    return problems


def _walk(node: Any, path: str) -> Iterator[tuple[str, DictConfig]]:
    if isinstance(node, DictConfig):
        if _get(node, "_target_") == MODEL_SPEC_TARGET:
            yield path, node
            return
        for key in map(str, node):
            if key not in _SKIP or path:
                yield from _walk(_child(node, key), f"{path}.{key}" if path else key)
    elif isinstance(node, ListConfig):
        for i in range(len(node)):
            yield from _walk(_child(node, i), f"{path}[{i}]")


def _child(node: Any, key: Any) -> Any:
    # Interpolations like ${hydra:...} cannot resolve outside a Hydra run: skip them.
    try:
        return node[key]
    except Exception:  # noqa: BLE001
        return None


_ENV_INTERPOLATION = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)")


def _env_name(node: DictConfig, key: str) -> str | None:
    """The environment variable a value is read from (``${oc.env:VAR,...}``), if any."""
    raw = node._get_node(key)
    m = _ENV_INTERPOLATION.search(str(raw._value())) if raw is not None else None
    return m.group(1) if m else None


def _get(node: DictConfig, key: str) -> Any:
    try:
        return node.get(key)
    except Exception:  # noqa: BLE001 - unresolvable interpolation: treat as unset
        return None


def _value(value: Any) -> Any:
    """Treat empty strings and the string ``null`` (from env defaults) as unset."""
    return None if value in ("", "null", "None") else value
