"""What a launch runs and where: every job's composed config, the pinned sweep dir, who opens the store.

The launch's first steps (:mod:`cts.compose.launch.steps`) read these before any job starts.
"""

from __future__ import annotations

import itertools
import os
from typing import TYPE_CHECKING

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from cts._util.interrupt import hydra_quote

if TYPE_CHECKING:
    from cts.sweep._compose import ComposedJobs


def sweep_job_configs(config: DictConfig, composed: ComposedJobs) -> list[DictConfig]:
    """The composed config of every job the sweep will launch, without launching any.

    Expands the command line's sweep overrides the way Hydra's basic sweeper does and
    composes each job's config with Hydra's own loader, so the pre-flight sees e.g.
    ``clarifier=gpt`` as well as ``clarifier=claude`` before the first job starts.

    Args:
        config: The sweep's config.
        composed: The launch's compose memo (the sweeper and the cts launcher do not compose again).

    Returns:
        The memo's configs, read-only (the launcher gets its own).
    """
    parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    loader = GlobalHydra.instance().config_loader()
    return [composed.view(loader, config, job) for job in sweep_jobs(parsed)]


def sweep_jobs(overrides: list[Override]) -> list[list[str]]:
    """The override list of every job of a sweep: the cartesian product of sweep values."""
    choices = []
    for o in overrides:
        key = o.get_key_element()
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        choices.append([f"{key}={v}" for v in values])
    return [list(job) for job in itertools.product(*choices)]


def traced_store(config: DictConfig) -> str | None:
    """The tracking URI when ``config`` asks for instance traces, read before any check (None on doubt).

    A value the checks would refuse reads as None: the writer started for it is only a head start.
    """
    wanted = OmegaConf.select(config, "tracking.instance_traces", default=None, throw_on_resolution_failure=False)
    uri = OmegaConf.select(config, "tracking.uri", default=None, throw_on_resolution_failure=False)
    return uri if wanted is True and isinstance(uri, str) and uri else None


def jobs_open_store_here(config: DictConfig) -> bool:
    """Whether the sweep's launcher runs every job in this process, one after another at the store.

    Such a launcher (its class sets ``opens_store_in_jobs = True``, as ``hydra/launcher=cts`` does)
    needs no preparation before the launch: the first job opens the store, under the same lock,
    while its first requests are already in flight, and a broken store fails it and the jobs after it.
    """
    from hydra.utils import get_class

    target = OmegaConf.select(config, "hydra.launcher._target_", default=None)
    try:
        return bool(target) and bool(getattr(get_class(str(target)), "opens_store_in_jobs", False))
    except (ImportError, ValueError):
        return False


def pin_sweep_dir(config: DictConfig) -> str:
    """Resolve the sweep dir once, absolute, and pin it into the sweep's config for every job.

    Hydra resolves ``hydra.sweep.dir`` (``${now:...}``) in each job's config again, when the
    job starts unless the launcher composed the job after the sweep's own value was resolved:
    the cts launcher's jobs landed in as many dirs as seconds the sweep took to start them.
    The value is set in the sweep's config and appended to ``hydra.overrides.hydra``, which
    every launcher (cts, basic, joblib, Slurm) applies when it composes a job's config.

    Returns:
        The sweep dir.
    """
    sweep_dir = os.path.abspath(str(config.hydra.sweep.dir))  # resolving it fills the ${now:} cache jobs copy
    pinned = f"hydra.sweep.dir={hydra_quote(sweep_dir)}"
    given = OmegaConf.to_container(config.hydra.overrides.hydra, resolve=False)  # e.g. subdir=job${hydra:job.num}
    assert isinstance(given, list)
    hydra_overrides = [o for o in given if str(o).lstrip("+~").split("=", 1)[0] != "hydra.sweep.dir"]
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.sweep.dir = sweep_dir
        config.hydra.overrides.hydra = [*hydra_overrides, pinned]
    return sweep_dir
