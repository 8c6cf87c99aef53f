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

from cts._util.secrets import literal_secrets, redact_yaml_file, remember_config

HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")
"""What Hydra saves into a job's ``hydra.output_subdir`` (``.hydra``)."""


def remember_secrets(config: DictConfig) -> None:
    """Remember every key ``config`` holds or names (masked from then on in logs, records and files)."""
    tree = OmegaConf.to_container(config, resolve=False)
    assert isinstance(tree, dict)
    remember_config(
        {str(k): v for k, v in tree.items()},
        lambda path: OmegaConf.select(config, path, default=None, throw_on_resolution_failure=False),
    )


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
