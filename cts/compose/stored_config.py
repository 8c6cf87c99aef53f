"""A job dir's saved config (``config.yaml``, ``.hydra/config.yaml``), read in today's names.

A job dir of an older version names config keys and ``_target_`` paths renamed since (old paths
do not import). Whatever reads a saved config again to build from it (``python -m cts.agreement``,
``cts.plan``'s sample size) reads it here, through the migrations of
:func:`cts.compat.config.migrate_job_config`.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from cts.compat.config import migrate_job_config


def load_job_config(path: Path) -> DictConfig:
    """The saved job config at ``path`` with every rename since applied (interpolations kept, unresolved).

    Raises:
        ValueError: ``path`` holds no mapping.
    """
    saved = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    if not isinstance(saved, dict):
        raise ValueError(f"{path}: not a config mapping")
    return OmegaConf.create(migrate_job_config({str(k): v for k, v in saved.items()}))
