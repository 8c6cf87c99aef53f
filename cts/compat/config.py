"""Stored configs in today's names: the protocol config beside the fingerprint, a job's whole config, ``services.llm``.

A job dir stores its protocol config beside the fingerprint (``fingerprint.json``); when a key of
it is renamed (one name, one meaning), the stored config hashes differently although it measures
the same thing. :func:`migrate` rewrites a stored config into today's names; a dir resumes when
the migrated config equals today's (:func:`cts.tasks.job.check_resume`), and never otherwise. A
migration only renames: a changed value still refuses the resume. :func:`migrate_job_config`
does the same for a job's whole stored config (``config.yaml``, ``.hydra/*.yaml``), for whatever
reads one again (``python -m cts.agreement``, ``cts.plan``'s sample size).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from cts.compat.migrate import Config, Migration, nodes
from cts.compat.renames import RENAMES


def component_name(target: str) -> str:
    """The name a ``_target_`` has in the protocol config: a cts component's own name, not its module path.

    ``cts.roles.llm.LLMClarifier`` is ``LLMClarifier`` wherever its module moves (names are
    unique among cts's components: tests/compose/test_schema.py); a component of your own
    package keeps its full path.
    """
    return target.rsplit(".", 1)[-1] if target.startswith("cts.") else target


def name_components(config: Config) -> None:
    """Rewrite every ``_target_`` of ``config`` (in place) to its :func:`component_name`."""
    for node in nodes(config):
        target = node.get("_target_")
        if isinstance(target, str):
            node["_target_"] = component_name(target)


NAMED_COMPONENTS = Migration("components by name, not module path: cts.llm.ModelSpec -> ModelSpec", name_components)
"""2026-12-04: the protocol config names each cts component, so a module move keeps the fingerprint."""

MIGRATIONS: tuple[Migration, ...] = (*(r.migration() for r in RENAMES if r.protocol), NAMED_COMPONENTS)
"""The renames of :data:`RENAMES` that stored protocol configs hold, oldest first, then the component names."""

JOB_CONFIG_MIGRATIONS: tuple[Migration, ...] = tuple(r.migration() for r in RENAMES if r.group is None)
"""The renames a job's whole stored config can hold: every key and ``_target_`` rename (not the options)."""


def migrate(stored: Mapping[str, Any], migrations: tuple[Migration, ...] | None = None) -> Config:
    """``stored`` with every rename of ``migrations`` (default :data:`MIGRATIONS`) applied, in order."""
    config = copy.deepcopy(dict(stored))
    for migration in MIGRATIONS if migrations is None else migrations:
        migration.apply(config)
    return config


def migrate_job_config(stored: Mapping[str, Any]) -> Config:
    """A job's stored config (``config.yaml``, ``.hydra/config.yaml``) in today's keys and ``_target_`` paths."""
    return migrate(stored, JOB_CONFIG_MIGRATIONS)


def same_config(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two protocol configs are equal as ``fingerprint.json`` stores them (JSON, ``default=str``)."""

    def canonical(x: Mapping[str, Any]) -> str:
        return json.dumps(x, sort_keys=True, default=str, ensure_ascii=False)

    return canonical(a) == canonical(b)


def upgrade_llm_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """A ``services.llm`` mapping (in place) with the USD cap under ``spend``: a stored config may say ``budget``."""
    old = raw.pop("budget", None) or {}
    if old and not raw.get("spend"):
        raw["spend"] = {k: v for k, v in old.items() if k == "max_usd"}
    return raw


def old_model_id_key(node: Mapping[str, Any]) -> str | None:
    """What is wrong with a model file that names its litellm id ``model:`` (the key before ``id:``), or None."""
    if "model" not in node or "id" in node:
        return None
    name = node.get("name") or "?"
    return (
        f"model {name}: the litellm id is `id:` now (it was `model:`): "
        f"write `id: {node['model']}` in conf/model/{name}.yaml"
    )


def structured_output_mode(value: Any) -> Any:
    """A model file's ``request.structured_output``: ``true``/``false`` of older model files as the mode they meant."""
    if isinstance(value, bool) or value is None:
        return "json_schema" if value else "none"
    return value
