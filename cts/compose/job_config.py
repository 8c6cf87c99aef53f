"""What a job's config and Hydra runtime say: its context, tags, tracking settings and protocol fingerprint.

The composition layer alone reads the config; these readers turn it into the plain records of
:mod:`cts.tasks.job` (:class:`~cts.tasks.job.JobContext`, :class:`~cts.tasks.job.Tracking`)
that tasks receive, and into the protocol config a job dir's fingerprint hashes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from cts import tracking
from cts._util.launch import swept_keys_of
from cts._util.naming import factors, job_name, override_items, system_name
from cts._util.secrets import scrub, scrub_tree
from cts.compat.config import name_components
from cts.compose.schema import operational_top, protocol_part
from cts.tasks.job import JobContext, Tracking


def tracking_settings(node: Mapping[str, Any]) -> Tracking:
    """The :class:`Tracking` of a ``tracking`` config node (keys it lacks take the defaults)."""
    keys = ("records_table", "instance_traces", "evaluation_dataset", "experiment_kind")
    return Tracking(str(node["uri"]), str(node["experiment"]), **{k: node[k] for k in keys if node.get(k) is not None})


def job_context(cfg: DictConfig) -> JobContext:
    """Read the Hydra runtime (or fall back to config values when run without it)."""
    out = Path(cfg.paths.output_dir)
    if not HydraConfig.initialized():
        return JobContext({}, f"k{cfg.k}", out, "")
    hc = HydraConfig.get()
    choices = {g: str(v) for g, v in hc.runtime.choices.items() if not g.startswith("hydra") and v}
    sweep = str(hc.sweep.dir) if hc.mode and hc.mode.name == "MULTIRUN" else ""
    swept = swept_keys_of(sweep) if sweep else ()
    name = job_run_name(list(hc.overrides.task), swept, f"clarifier={choices.get('clarifier', 'run')},k={cfg.k}")
    written = OmegaConf.to_container(hc.overrides.task, resolve=False)  # ${oc.env:KEY} stays unresolved
    assert isinstance(written, list)
    given = tuple(str(o) for o in written)  # as typed: ${oc.env:KEY} resolved would put the key into the resume command
    return JobContext(choices, name, out, sweep, tuple(stored_overrides([str(o) for o in written])), swept, given)


def job_run_name(overrides: list[str], swept: tuple[str, ...] | None, fallback: str) -> str:
    """The MLflow run name: the swept factors in a multirun (as the job dir), else ``fallback``.

    Args:
        swept: The keys the sweep varies (empty outside a multirun, None when no record says).
    """
    return job_name(overrides, swept, fallback) if swept != () else fallback


def stored_overrides(overrides: Sequence[str]) -> list[str]:
    """``overrides`` as ``summary.json`` and MLflow keep them: a secret's value masked, the rest as written."""
    out = []
    for text, (key, value) in zip(overrides, override_items(overrides)):
        safe = scrub(key, value)
        quoted = safe.replace("'", "\\'")  # a masked value keeps Hydra's syntax: the report parses it again
        out.append(text if safe == value else f"{key}='{quoted}'")
    return out


def in_multirun() -> bool:
    """Whether this process runs a job of a Hydra multirun."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def task_overrides() -> list[str]:
    """The job's command-line overrides (empty outside Hydra)."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def protocol_config(cfg: DictConfig) -> dict[str, Any]:
    """Everything that changes what a job measures (not where it writes), resolved.

    The keys are those :mod:`cts.compose.schema` does not declare operational (a key no schema
    declares counts), and each component's ``_target_`` is its name, not its module path
    (:func:`cts.compat.config.component_name`): moving a module keeps the fingerprint.
    """
    operational = operational_top()
    keys = [str(k) for k in cfg if k not in operational]
    try:  # resolved, so that a dataset path or an endpoint read from the environment counts too
        data = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=True)
    except Exception:  # noqa: BLE001 - e.g. ${hydra:...} outside a Hydra run: the written config
        data = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=False)
    assert isinstance(data, dict)
    kept = protocol_part({str(k): v for k, v in data.items()})
    name_components(kept)
    # Secrets masked: fingerprint.json stores this, and a rotated key measures the same thing.
    return scrub_tree(kept)


def protocol_fingerprint(cfg: DictConfig) -> str:
    """Hash of :func:`protocol_config`."""
    return fingerprint_of(protocol_config(cfg))


def fingerprint_of(protocol: Mapping[str, Any]) -> str:
    """The fingerprint of a :func:`protocol_config`."""
    return hashlib.sha256(json.dumps(protocol, sort_keys=True, default=str).encode()).hexdigest()[:16]


def job_tags(cfg: DictConfig, ctx: JobContext) -> dict[str, str]:
    """Tags the report and notebooks select runs by."""
    tags = {
        "cts.kind": "job",
        "cts.job_dir": str(ctx.job_dir),
        "cts.sweep_dir": ctx.sweep_dir,
        "cts.system": system_name(ctx.choices, factors(list(ctx.overrides), ctx.swept)),
        "cts.k": str(cfg.k),
    }
    tags.update({f"cts.choice.{g}": v for g, v in ctx.choices.items()})
    tags.update(tracking.override_tags(ctx.overrides, ctx.swept))
    return tags
