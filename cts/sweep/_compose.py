"""Compose each job's config of a sweep once per process, and most of them from a sibling's.

Hydra composes every job of a multirun three times in the launching process: the
pre-flight (``cts.compose.launch``), the sweeper's ``validate_batch_is_legal`` and the
launcher. The first result is kept and later callers get a copy.

Composition itself is the slow part of starting a sweep (about 0.4 s of CPU a job here:
Hydra reads and merges every file of the defaults tree again), and most jobs of a grid
differ from another job only in plain values (``k=1,2,3``). Two such jobs have the same
defaults tree: Hydra composes it, then assigns the command line's values. So a job whose
overrides differ from an already composed sibling's only in the scalar values of the same
plain ``key=value`` overrides is composed from the sibling: a copy, the job's values
assigned with Hydra's own override code, and the fields Hydra derives from the overrides
(``hydra.overrides.task``, ``hydra.job.override_dirname``) set as Hydra sets them.
The memo belongs to one launch (:class:`ComposedJobs`, ``Launch.composed``).
``tests/sweep/test_compose.py`` checks that such configs equal Hydra's own, job by job.
Anything else (a group choice, ``+key``, ``~key``, a list or dict value) is composed by Hydra,
and those compositions read each config file once per launch (:mod:`cts.sweep._config_files`).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cts.sweep._config_files import ConfigFiles


class ComposedJobs:
    """The job configs one launch composed (its compose memo: ``Launch.composed``), by master config and overrides.

    It lives as long as its launch: the callbacks' pre-flight fills it, the sweeper and the
    launcher read it, and the next launch starts with a new one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memo: dict[tuple[int, tuple[str, ...]], tuple[Any, DictConfig]] = {}
        self._siblings: dict[tuple[int, tuple[str, ...]], tuple[Any, DictConfig]] = {}
        self._files = ConfigFiles()

    def compose(self, loader: Any, master: DictConfig, overrides: Sequence[str]) -> DictConfig:
        """``loader.load_sweep_config(master, overrides)``, composed once per master config and overrides.

        Args:
            loader: Hydra's config loader.
            master: The sweep's config (the one the launching process composed).
            overrides: The job's overrides.

        Returns:
            A fresh copy: callers may change it (the launcher sets the job's id).
        """
        return _writable(copy.deepcopy(self.view(loader, master, overrides)))

    def view(self, loader: Any, master: DictConfig, overrides: Sequence[str]) -> DictConfig:
        """The memo's own config of the job, read-only: for readers (the pre-flight), spared a copy.

        A copy of a full job config costs about 20 ms here; the pre-flight reads every job's once.
        """
        key = (id(master), tuple(overrides))
        with self._lock:
            hit = self._memo.get(key)
        if hit is not None and hit[0] is master:  # an id reused by another object is not a hit
            return hit[1]
        shape = _value_shape(loader, overrides)
        config = self._from_sibling(master, overrides, shape)
        if config is None:
            reading_once = self._files.loader(loader)
            config = reading_once.load_sweep_config(master_config=master, sweep_overrides=list(overrides))
            if shape is not None:
                with self._lock:
                    self._siblings.setdefault((id(master), shape), (master, config))
        OmegaConf.set_readonly(config, True)  # a reader that writes would change every later copy
        with self._lock:
            self._memo[key] = (master, config)
        return config

    def take(self, loader: Any, master: DictConfig, overrides: Sequence[str]) -> DictConfig:
        """:meth:`compose` for the job's last reader (the launcher): the memo's own config, then forgotten.

        Hydra's ``run_job`` copies the config it is given, so the launcher's copy is saved. A config
        that later siblings are made from stays in the memo and is copied, as :meth:`compose` does.
        The pre-flight's read-only view of it is then the same object: it has read it by then.
        """
        key = (id(master), tuple(overrides))
        with self._lock:
            hit = self._memo.get(key)
            source = hit is not None and any(hit[1] is s[1] for s in self._siblings.values())
            if hit is not None and hit[0] is master and not source:
                del self._memo[key]
                return _writable(hit[1])
        return self.compose(loader, master, overrides)

    def _from_sibling(
        self, master: DictConfig, overrides: Sequence[str], shape: tuple[str, ...] | None
    ) -> DictConfig | None:
        """A composed sibling of the same shape made into the job's config (None: no sibling)."""
        if shape is None:
            return None
        with self._lock:
            sibling = self._siblings.get((id(master), shape))
        if sibling is None or sibling[0] is not master:
            return None
        return _from_sibling(master, overrides, shape, sibling[1])


def _value_shape(loader: Any, overrides: Sequence[str]) -> tuple[str, ...] | None:
    """What a sibling must share: the overrides with each plain scalar value blanked (None: compose it fully)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    repo = getattr(loader, "repository", None)
    if repo is None:
        return None
    shape = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        value = override.value()
        plain = not (override.is_add() or override.is_delete() or override.is_force_add() or override.package)
        if plain and not repo.group_exists(override.key_or_group) and _scalar(value):
            shape.append(f"{override.key_or_group}=<value>")
        elif plain and repo.group_exists(override.key_or_group):
            shape.append(override.input_line or "")  # the same group choice, or no sibling
        else:
            return None
    return tuple(shape)


def _writable(config: DictConfig) -> DictConfig:
    """``config`` with the memo's read-only flag lifted (Hydra's own, on ``hydra``, stays)."""
    OmegaConf.set_readonly(config, None)
    return config


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _from_sibling(
    master: DictConfig, overrides: Sequence[str], shape: tuple[str, ...], sibling: DictConfig
) -> DictConfig:
    """The job's config made from a composed sibling of the same shape, as Hydra would compose it."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import open_dict

    config = _writable(copy.deepcopy(sibling))
    hydra_lines = list(OmegaConf.to_container(master.hydra.overrides.hydra) or [])
    parsed = OverridesParser.create().parse_overrides([*hydra_lines, *overrides])
    task = [o for o in parsed if not o.is_hydra_override()]
    values = [o for o in task if (o.input_line or "") not in shape]
    ConfigLoaderImpl._apply_overrides_to_config(values, config)
    with open_dict(config.hydra):
        config.hydra.overrides.task = [o.input_line for o in task]
        settings = config.hydra.job.config.override_dirname
        config.hydra.job.override_dirname = get_overrides_dirname(
            overrides=task, kv_sep=settings.kv_sep, item_sep=settings.item_sep, exclude_keys=settings.exclude_keys
        )
    OmegaConf.copy_cache(from_config=master, to_config=config)
    return config


class MemoConfigLoader:
    """A Hydra config loader whose ``load_sweep_config`` goes through a launch's :class:`ComposedJobs`.

    Everything else is delegated to the wrapped loader.

    Args:
        inner: Hydra's loader.
        composed: The launch's compose memo (a new one when not given).
    """

    def __init__(self, inner: Any, composed: ComposedJobs | None = None) -> None:
        self.inner = inner
        self.composed = composed if composed is not None else ComposedJobs()

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        """See :meth:`ComposedJobs.view`: read-only.

        Its callers in a launch read (the sweeper's ``validate_batch_is_legal`` composes each job and
        drops it); the launcher, which changes its job's config, takes it with :meth:`take_sweep_config`.
        """
        return self.composed.view(self.inner, master_config, sweep_overrides)

    def take_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        """See :meth:`ComposedJobs.take`."""
        return self.composed.take(self.inner, master_config, sweep_overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
