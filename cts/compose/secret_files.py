"""Keys kept out of what Hydra writes for a launch: its ``.hydra/*.yaml`` files and a sweep's ``multirun.yaml``.

Hydra saves a job's config, its Hydra config and its overrides before the job starts, as
given: a key typed on the command line (``services.llm.api_key=sk-...``) would stay in them.
:func:`hide_written_secrets` (the launch callbacks' ``on_job_start``, right after Hydra wrote
them) rewrites them with every key masked (:mod:`cts._util.secrets`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from cts._util.naming import override_items
from cts._util.secrets import is_secret_key, literal_secrets, redact_yaml_file, remember

HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")
"""What Hydra saves into a job's ``hydra.output_subdir`` (``.hydra``)."""


def remember_secrets(config: DictConfig) -> None:
    """Remember the keys ``config`` was given: typed on the command line, or in ``services.llm.api_key``.

    The keys the models' ``api_key_env`` name are remembered where they are read (``cts.llm.route_for``).
    Not a walk of the whole config: 40 ms, once per job (this reads the two places a key is given).
    """
    node = OmegaConf.select(config, "hydra.overrides.task", default=None)
    overrides = OmegaConf.to_container(node, resolve=False) if node is not None else []
    typed = [str(o) for o in overrides] if isinstance(overrides, list) else []
    if any(is_secret_key(o.split("=", 1)[0]) for o in typed):
        remember(*(value for _, (key, value) in zip(typed, override_items(typed)) if is_secret_key(key)))
    remember(OmegaConf.select(config, "services.llm.api_key", default=None, throw_on_resolution_failure=False))


def written_files(config: DictConfig) -> list[Path]:
    """The files Hydra wrote for the job (or sweep) of ``config`` that may hold its overrides' values."""
    found = []
    subdir = OmegaConf.select(config, "hydra.output_subdir", default=None)
    out = OmegaConf.select(config, "hydra.runtime.output_dir", default=None)
    if subdir is not None and out:
        found += [Path(str(out)) / str(subdir) / name for name in HYDRA_FILES]
    mode = OmegaConf.select(config, "hydra.mode", default=None)
    if mode is not None and str(mode).endswith("MULTIRUN"):
        found.append(Path(str(config.hydra.sweep.dir)) / "multirun.yaml")
    return found


def hide_written_secrets(config: DictConfig) -> None:
    """Mask the keys in what Hydra wrote for the job of ``config`` (see the module docstring)."""
    remember_secrets(config)
    for path in written_files(config):
        redact_yaml_file(path)


def warn_literal_secrets(overrides: Sequence[str]) -> None:
    """Say once, on stderr, that a key was typed on the command line, and how to pass it instead."""
    keys = sorted(set(literal_secrets(overrides)))
    if keys:
        print(
            f"warning: {', '.join(keys)} given on the command line: cts masks it (***) in every file, log, record "
            "and MLflow entry it writes, and in the resume commands it prints, but your shell history keeps it; "
            "export it and pass e.g. key='${oc.env:MY_KEY}' instead",
            file=sys.stderr,
            flush=True,
        )
