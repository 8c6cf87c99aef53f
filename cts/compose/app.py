"""Composition: config -> services and components -> task -> tracking.

This is the one place that builds components from config options (:func:`build_node`); a
component receives exactly what its signature asks for (a chat client, the index, the
corpus ...: :func:`cts.compose.services.component_arguments`), never the job's services.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from cts._util.console import DETAIL
from cts._util.launch import Preflight, current_launch
from cts.compose.checks import (  # noqa: F401 - the pre-flight, also reached through this module
    OFFLINE_COMMAND,
    preflight,
    preflight_problems_of,
    stop_on_problems,
    unknown_key_problems,
)
from cts.compose.job_config import in_multirun
from cts.compose.probes import exit_on_probe_problems, probe_completions, probe_endpoints, task_groups  # noqa: F401 - re-exported
from cts.compose.schema import LLM
from cts.compose.services import Services, component_arguments, resource_parameters
from cts.core.errors import JobDirLocked
from cts.tasks.registry import OutputsUnwritable, task_spec

if TYPE_CHECKING:
    from cts.llm import LLMRuntime
    from cts.protocol.spend import SpendLimit
    from cts.tasks.job import RunInfo

log = logging.getLogger(__name__)


def run(cfg: DictConfig) -> float | None:
    """Entry point called by ``run.py``: the ``run`` step of a launch, for one job.

    Bad input (a broken dataset, an unset mandatory key ...) exits 1 with one line
    per problem (see :mod:`cts.compose.errors`); prompts are recorded per job. What the launch's
    steps already checked, probed or read before its jobs started (:mod:`cts.compose.launch.steps`,
    :class:`cts._util.launch.Launch`) is not done again: a job no launch checked checks itself.
    """
    from cts._util.prompts import prompt_scope
    from cts._util.startup import end_startup_gc
    from cts.compose.errors import input_errors, quiet_unwritable_logs
    from cts.compose.services import local_llm_served
    from cts.sweep import current_session

    if current_session() is None:  # a sweep's session does it once all its jobs are set up
        end_startup_gc()
    quiet_unwritable_logs()
    with input_errors(cfg), prompt_scope():
        if not checked_by_launch():
            check_job_config(cfg)
        services = build_services(cfg)  # then the job's local LLM server, if any (services.local_llm)
        with (
            local_llm_served(
                services, build_node(cfg.services.get("local_llm"), services), Path(cfg.paths.output_dir)
            ) as services,
            left_to_the_holder(),
        ):
            return run_configured_task(cfg, services)
    return None  # the job's dir is another process's (left_to_the_holder)


def check_job_config(cfg: DictConfig) -> None:
    """The checks of a job no launch checked: its values and pre-flight; a single run's endpoints too.

    A sweep's job in a worker process (joblib, Slurm) leaves the probes to the launching process.
    """
    from cts.compose.errors import InputError, missing_values
    from cts.compose.validate import value_problems

    if problems := missing_values(cfg) or value_problems(cfg):
        raise InputError(problems)
    preflight(cfg, groups=task_groups(cfg))
    if not in_multirun():
        launch = current_launch()
        memo = launch.preflight if launch is not None else None
        probe_endpoints([cfg], memo)
        probe_completions([cfg], memo)


@contextlib.contextmanager
def left_to_the_holder() -> Iterator[None]:
    """In a multirun, a job whose dir another process holds is that one's: one line, and the job ends without failing.

    Two sweeps started into one dir run each job once; the process that finishes last writes the
    report (:mod:`cts.sweep._shared`). A single run in a held dir stays an error (``JobDirLocked``).
    """
    from tqdm import tqdm

    try:
        yield
    except JobDirLocked as e:
        if not in_multirun():
            raise
        line = f"{e.message.partition(';')[0]}: this sweep leaves the job to it"
        tqdm.write(line, file=sys.stderr)  # above the sweep's progress bar


def checked_by_launch() -> bool:
    """Whether this context's launch checked the running job's values and pre-flight before its jobs started.

    The launch's ``check`` step (:func:`cts.compose.launch.steps.check`) checks every job's composed
    config and notes its overrides; the job's own config (Hydra's, by its overrides in ``HydraConfig``)
    is that composition (the same master config and overrides; a sweep's through the launch's compose
    memo), so its run does not check it again.
    """
    from cts.compose.job_config import task_overrides

    launch = current_launch()
    return launch is not None and tuple(task_overrides()) in launch.preflight.checked


def check_start(config: DictConfig, jobs: Sequence[DictConfig], memo: Preflight | None = None) -> None:
    """Refuse a run whose values, output places or input files are bad, before any store or dir exists.

    The launch's ``check`` step (:func:`cts.compose.launch.steps.check`) calls it before the pre-flight,
    with the run's (or sweep's) ``config`` and every job's composed config. Exits 1 with one ``error:`` line each:
    :func:`cts.compose.model_checks.spec_key_problems`, :func:`cts.compose.validate.value_problems`,
    :func:`cts.compose.validate.output_problems`, :func:`preload_inputs`.

    Args:
        config: The run's or sweep's config.
        jobs: Every job's composed config.
        memo: The launch's pre-flight memo, which keeps the inputs read for the jobs (None: not kept).
    """
    from cts.compose.checks import output_problems
    from cts.compose.errors import InputError, input_errors, missing_values, refuse
    from cts.compose.model_checks import batch_problems, spec_key_problems
    from cts.compose.probes import task_groups
    from cts.compose.validate import appended_key_problems, value_problems

    refuse(list(dict.fromkeys(p for job in jobs for p in appended_key_problems(job))))  # +concurency=1
    refuse([p for job in jobs for p in spec_key_problems(job)])  # before any spec is built from a model file
    refuse([p for job in jobs for p in value_problems(job)])
    refuse(sorted({p for job in jobs for p in batch_problems(job, task_groups(job))}))
    refuse(output_problems(config))
    for job in jobs:
        with input_errors(job, exit_in_debug=True):
            if missing := missing_values(job, exclude=("hydra",)):
                raise InputError(missing)
            preload_inputs(job, memo if memo is not None else Preflight())


def preload_inputs(cfg: DictConfig, memo: Preflight) -> None:
    """Read the task's input files now (a dataset built from files alone, build_gold's instances).

    A broken file is refused before anything is created, and the task reuses what was read
    (:meth:`ConfiguredTask.input`), kept in the launch's ``memo``. An input built from the
    job's resources (the demo set) is left to the job.
    """
    try:
        found = task_spec(str(cfg.task._target_)).read(ConfiguredTask(cfg, build_services(cfg), files_only=True))
    except _NeedsResources:
        return
    memo.inputs[_input_key(cfg)] = found


def _input_key(cfg: DictConfig) -> str:
    """The task, its resolved dataset config, and the size and mtime of each file that config names."""
    ds = OmegaConf.to_container(cfg.dataset, resolve=True)
    names = [v for v in (ds.values() if isinstance(ds, dict) else ()) if isinstance(v, str) and os.path.isfile(v)]
    files = [(n, os.stat(n).st_size, os.stat(n).st_mtime_ns) for n in names]
    return json.dumps([str(cfg.task._target_), ds, files], sort_keys=True, default=str)


class _NeedsResources(Exception):
    """A reader asked, before the job, for a component that needs the job's resources."""


_ABSENT = object()


class ConfiguredTask:
    """The :class:`cts.tasks.registry.TaskContext` of one job: what its task's composer may ask of the config.

    Args:
        files_only: Refuse to build a component that takes job resources (the pre-start read of inputs).
    """

    def __init__(self, cfg: DictConfig, services: Services, *, files_only: bool = False) -> None:
        self._cfg, self._services, self._files_only = cfg, services, files_only

    @functools.cached_property
    def run(self) -> RunInfo:
        return run_info(self._cfg)

    @functools.cached_property
    def fingerprint(self) -> str:
        from cts.compose.job_config import fingerprint_of

        return fingerprint_of(self.protocol_config)  # the protocol config, made once per job

    @functools.cached_property
    def protocol_config(self) -> dict[str, Any]:
        from cts.compose.job_config import protocol_config

        return protocol_config(self._cfg)

    @property
    def spend_limit(self) -> SpendLimit:
        return llm_spend_limit(self._services)

    @property
    def llm(self) -> LLMRuntime:
        return self._services.llm

    def _node(self, key: str, parts: Sequence[str]) -> Any:
        node = OmegaConf.select(self._cfg, key, default=_ABSENT)
        for part in parts:
            node = node.get(part, _ABSENT) if isinstance(node, DictConfig) else _ABSENT
        return node

    def value(self, key: str, *parts: str, default: Any = _ABSENT) -> Any:
        node = self._node(key, parts)
        if node is _ABSENT:
            if default is _ABSENT:
                raise KeyError(".".join([key, *parts]))
            return default
        return OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node

    def values(self, *keys: str) -> dict[str, Any]:
        resolved = OmegaConf.to_container(OmegaConf.masked_copy(self._cfg, list(keys)), resolve=True)
        assert isinstance(resolved, dict)
        return {str(k): v for k, v in resolved.items()}

    def keys(self, key: str, *parts: str) -> list[str]:
        node = self._node(key, parts)
        return [str(k) for k in node] if isinstance(node, DictConfig) else []

    def build(self, key: str, *parts: str) -> Any:
        node = self._node(key, parts)
        if node is _ABSENT:
            raise KeyError(".".join([key, *parts]))
        if self._files_only and isinstance(node, DictConfig) and "_target_" in node:
            if resource_parameters(get_object(str(node._target_))):
                raise _NeedsResources(key)
        return build_node(node, self._services)

    def model_ids(self, *keys: str) -> dict[str, str]:
        from cts.compose.model_checks import find_model_specs

        return {
            path: str(node.get("id")) for path, node in find_model_specs(OmegaConf.masked_copy(self._cfg, list(keys)))
        }

    def input(self) -> Any:
        """What :func:`preload_inputs` read if its files are unchanged (a sweep's jobs share it), else read now."""
        key = _input_key(self._cfg)
        launch = current_launch()
        inputs = launch.preflight.inputs if launch is not None else {}
        found = inputs.get(key) if in_multirun() else inputs.pop(key, None)
        return found if found is not None else task_spec(str(self._cfg.task._target_)).read(self)

    def resource_counters(self) -> dict[str, float]:
        return self._services.counters()

    def places(self) -> tuple[str, ...]:
        from cts.compose.services import concretiser_places

        return concretiser_places(self._services)


def run_configured_task(cfg: DictConfig, services: Services) -> float | None:
    """Run the task ``task._target_`` names: its composer turns the config into the task's typed arguments."""
    from cts.compose.errors import stop_unwritable

    try:
        return task_spec(str(cfg.task._target_)).compose(ConfiguredTask(cfg, services))
    except OutputsUnwritable as e:
        stop_unwritable(e.fault, e.job_dir, e.instances, e.resume, multirun=e.multirun)
        raise e.fault from e.__cause__


def run_info(cfg: DictConfig) -> RunInfo:
    """Where the job sits, its tracking settings, resolved config and tags."""
    from cts.compose.job_config import job_context, job_tags, tracking_settings
    from cts.tasks.job import RunInfo

    ctx, t = job_context(cfg), cfg.tracking
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    return RunInfo(ctx, tracking_settings(t), cast("dict[str, Any]", resolved), job_tags(cfg, ctx))


def llm_spend_limit(services: Services) -> SpendLimit:
    """The job's LLM spend limit (``services.llm.spend.max_usd``, ``timeout_s``); the runtime is built only if capped."""
    from cts.protocol.spend import SpendLimit

    llm = services.settings.get("llm") or {}
    cap = (llm.get("spend") or {}).get("max_usd")
    timeouts = [
        llm.get("timeout_s") or LLM().timeout_s,
        *(llm.get("role_timeout_s") or {}).values(),
    ]  # the longest settles
    return SpendLimit(
        None if cap is None else float(cap),
        float(max(t for t in timeouts if t is not None)),
        lambda usd, job_dir: services.llm.count_prior_spend(usd, job_dir),
    )


def build_services(cfg: DictConfig) -> Services:
    """The job's shared resources (corpus, index, LLM runtime), built lazily."""
    settings = OmegaConf.to_container(cfg.services, resolve=True)
    return Services(cache_dir=Path(cfg.paths.cache_dir).expanduser(), settings=settings)  # type: ignore[arg-type]  # a mapping node: a dict


def build_node(node: Any, services: Services) -> Any:
    """Build one config option (a node with ``_target_``): the one builder of every component.

    Nested component nodes (a model spec, a search provider, a fetcher and its routes)
    are built first, inside out; plain values arrive as plain Python containers. A
    parameter typed ``Chat`` gets a client for the model spec under its key, and one
    typed as a job resource (``Corpus``, ``CorpusIndex`` ...) gets that resource.
    """
    if not (isinstance(node, DictConfig) and "_target_" in node):
        return _plain_value(node, services)
    target = get_object(str(node._target_))
    kwargs = {str(k): _plain_value(node[k], services) for k in node if not str(k).startswith("_")}
    obj = target(**component_arguments(target, kwargs, services))
    log.info("built %s", node._target_, extra=DETAIL)  # run.log only (cts._util.console)
    return obj


def _plain_value(value: Any, services: Services) -> Any:
    if isinstance(value, DictConfig):
        if "_target_" in value:
            return build_node(value, services)
        return {str(k): _plain_value(value[k], services) for k in value}
    if isinstance(value, ListConfig):
        return [_plain_value(v, services) for v in value]
    return value
