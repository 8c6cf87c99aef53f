"""Composition: config -> services and components -> task -> tracking.

This is the one place that builds components from config options (:func:`build_node`); a
component receives exactly what its signature asks for (a chat client, the index, the
corpus ...: :func:`cts.compose.services.component_arguments`), never the job's services.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from cts.compose.checks import (  # noqa: F401 - the pre-flight, also reached through this module
    OFFLINE_COMMAND,
    preflight,
    preflight_problems_of,
    stop_on_problems,
    unknown_key_problems,
)
from cts.compose.probes import exit_on_probe_problems, probe_completions, probe_endpoints, task_groups  # noqa: F401 - re-exported
from cts.compose.services import Services, component_arguments, resource_parameters
from cts.tasks.job import in_multirun

if TYPE_CHECKING:
    from cts.protocol.budget import Budget
    from cts.protocol.pipeline import Roles
    from cts.tasks.job import RunInfo

log = logging.getLogger(__name__)


def run(cfg: DictConfig) -> float | None:
    """Entry point called by ``run.py``: pre-flight, then run the configured task.

    Bad input (a broken dataset, an unset mandatory key ...) exits 1 with one line
    per problem (see :mod:`cts.compose.errors`); prompts are recorded per job. The endpoints
    are probed here for a single run; a multirun probes every job's endpoints once in
    the launching process (``cts.compose.callbacks``), before any job starts.
    """
    from cts._util.prompts import prompt_scope
    from cts._util.startup import end_startup_gc
    from cts.compose.errors import (
        InputError,
        input_errors,
        missing_values,
        quiet_unwritable_logs,
    )
    from cts.compose.services import local_llm_served
    from cts.compose.validate import value_problems
    from cts.sweep import current_session

    if current_session() is None:  # a sweep's session does it once all its jobs are set up
        end_startup_gc()
    quiet_unwritable_logs()
    with input_errors(cfg), prompt_scope():
        if problems := missing_values(cfg) or value_problems(cfg):
            raise InputError(problems)
        preflight(cfg, groups=task_groups(cfg))
        if not in_multirun():
            probe_endpoints([cfg])
            probe_completions([cfg])
        services = build_services(cfg)  # then the job's local LLM server, if any (services.local_llm)
        with local_llm_served(
            services, build_node(cfg.services.get("local_llm"), services), Path(cfg.paths.output_dir)
        ) as services:
            return run_task(cfg, services)


def check_start(config: DictConfig, jobs: Sequence[DictConfig]) -> None:
    """Refuse a run whose values, output places or input files are bad, before any store or dir exists.

    The Hydra callback calls it before the pre-flight (:mod:`cts.compose.callbacks`), with the run's
    (or sweep's) ``config`` and every job's composed config. Exits 1 with one ``error:`` line each:
    :func:`cts.compose.validate.value_problems`, :func:`cts.compose.validate.output_problems`, :func:`preload_inputs`.
    """
    from cts.compose.checks import output_problems
    from cts.compose.errors import InputError, input_errors, missing_values, refuse
    from cts.compose.validate import value_problems

    refuse([p for job in jobs for p in value_problems(job)])
    refuse(output_problems(config))
    for job in jobs:
        with input_errors(job, exit_in_debug=True):
            if missing := missing_values(OmegaConf.masked_copy(job, [k for k in job if k != "hydra"])):
                raise InputError(missing)
            preload_inputs(job)


def preload_inputs(cfg: DictConfig) -> None:
    """Read the task's input files now (a dataset built from files alone, the gold task's instances).

    A broken file is refused before anything is created, and the task reuses what was read
    (:func:`task_input`). A dataset built from the job's resources (the demo set) is left to the job.
    """
    reader = INPUTS.get(str(cfg.task._target_))
    if reader is not None and not (reader is _dataset and resource_parameters(get_object(str(cfg.dataset._target_)))):
        _INPUTS[_input_key(cfg)] = reader(cfg, build_services(cfg))


def task_input(cfg: DictConfig, services: Services) -> Any:
    """The task's input: what :func:`preload_inputs` read if its files are unchanged (a sweep's jobs share it)."""
    key = _input_key(cfg)
    found = _INPUTS.get(key) if in_multirun() else _INPUTS.pop(key, None)
    return found if found is not None else INPUTS[str(cfg.task._target_)](cfg, services)


def _input_key(cfg: DictConfig) -> str:
    """The task, its resolved dataset config, and the size and mtime of each file that config names."""
    ds = OmegaConf.to_container(cfg.dataset, resolve=True)
    names = [v for v in (ds.values() if isinstance(ds, dict) else ()) if isinstance(v, str) and os.path.isfile(v)]
    files = [(n, os.stat(n).st_size, os.stat(n).st_mtime_ns) for n in names]
    return json.dumps([str(cfg.task._target_), ds, files], sort_keys=True, default=str)


def _dataset(cfg: DictConfig, services: Services) -> Any:
    return build_node(cfg.dataset, services)


def _gold_instances(cfg: DictConfig, services: Services) -> Any:
    from cts.data.jsonl import MAX_FIELD_CHARS, read_instances_jsonl

    ds = cfg.dataset
    return read_instances_jsonl(ds.path, ds.get("fields"), ds.get("max_field_chars", MAX_FIELD_CHARS))


_INPUTS: dict[str, Any] = {}


def run_task(cfg: DictConfig, services: Services) -> float | None:
    """Turn the config into the configured task's typed arguments (building its components), then run it."""
    target = str(cfg.task._target_)
    compose = TASKS.get(target)
    if compose is None:
        raise ValueError(f"task._target_={target} is not a cts task (known: {', '.join(sorted(TASKS))})")
    return compose(cfg, services)


def build_roles(cfg: DictConfig, services: Services) -> Roles:
    """Build the clarifier, UA, rewriter, search backend, judge and question typer."""
    from cts.protocol.pipeline import Roles

    return Roles(**{g: build_node(cfg[g], services) for g in ROLE_GROUPS})


def role_models(cfg: DictConfig) -> dict[str, str]:
    """Per role: the model id it calls (``<group>.model.model``), or the baseline's class."""
    out = {}
    for group in ROLE_GROUPS:
        model = OmegaConf.select(cfg, f"{group}.model.model", default=None)
        out[group] = str(model or cfg[group]._target_.rsplit(".", 1)[-1])
    return out


def run_info(cfg: DictConfig) -> RunInfo:
    """Where the job sits, its tracking settings, resolved config and tags."""
    from cts.tasks.job import RunInfo, job_context, job_tags, tracking_settings

    ctx, t = job_context(cfg), cfg.tracking
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    return RunInfo(ctx, tracking_settings(t), resolved, job_tags(cfg, ctx))


def llm_budget(services: Services) -> Budget:
    """The job's LLM budget (``services.llm.budget.max_usd``, ``timeout_s``); the runtime is built only if capped."""
    from cts.protocol.budget import Budget

    llm = services.settings.get("llm") or {}
    cap = (llm.get("budget") or {}).get("max_usd")
    timeouts = [llm.get("timeout_s") or 120.0, *(llm.get("role_timeout_s") or {}).values()]  # the longest settles
    return Budget(
        None if cap is None else float(cap),
        float(max(t for t in timeouts if t is not None)),
        lambda usd, job_dir: services.llm.count_prior_spend(usd, job_dir),
    )


def design_of(cfg: DictConfig) -> Any:
    """The job's :class:`cts.protocol.design.Design` (``repeats``, ``repeat_temperature``, ``repeat_stages``, ``arms``)."""
    from cts.protocol.design import Design

    try:
        return Design.of(
            cfg.get("repeats", 1), cfg.get("repeat_temperature"), cfg.get("repeat_stages"), cfg.get("arms")
        )
    except (TypeError, ValueError) as e:
        raise SystemExit(f"cts: {e}") from None


def evaluate(cfg: DictConfig, services: Services) -> float | None:
    """Task ``evaluate``: check the job dir, build the dataset and roles, run the protocol."""
    from cts import tracking
    from cts._util.interrupt import resume_command
    from cts._util.io import output_fault, unwritable
    from cts.compose.errors import stop_unwritable
    from cts.tasks.evaluate import (
        EvalProtocol,
        Resume,
        check_job,
        evaluate_task,
        select_instances,
    )
    from cts.tasks.job import (
        job_context,
        orig_parts,
        protocol_config,
        protocol_fingerprint,
        task_overrides,
    )

    job_dir = job_context(cfg).job_dir
    resume = Resume(
        protocol_fingerprint(cfg), protocol_config(cfg), resume_command(task_overrides(), job_dir), in_multirun()
    )
    check_job(cfg.k, job_dir, resume)
    design = design_of(cfg)  # a bad design stops the job before anything is built
    dataset = task_input(cfg, services)
    roles = build_roles(cfg, services)
    if cfg.services.llm.get("tracing"):
        tracking.trace_llm_calls(services.llm)
    stats = OmegaConf.to_container(cfg.stats, resolve=True)
    assert isinstance(stats, dict)
    try:
        return evaluate_task(
            dataset=dataset,
            roles=roles,
            protocol=EvalProtocol(cfg.k, cfg.seed, stats, design),
            run=run_info(cfg),
            resume=resume,
            budget=llm_budget(services),
            models=role_models(cfg),
            orig_parts=orig_parts(cfg),
            limit=cfg.limit,
            concurrency=cfg.concurrency,
            resource_stats=services.stats,
        )
    except OSError as e:
        fault = output_fault(e)
        if fault is None:
            raise
        named = fault if fault.filename is not None else unwritable(fault, job_dir)  # e.g. a flush: the job dir
        stop_unwritable(named, job_dir, select_instances(dataset, cfg.limit), resume.command, multirun=resume.multirun)
        raise named from e


def gold(cfg: DictConfig, services: Services) -> float:
    """Task ``gold``: read the instances, build search and extractor, archive their gold."""
    from cts.llm.preflight import find_model_specs
    from cts.tasks.gold import gold_task
    from cts.tasks.job import protocol_fingerprint

    instances = task_input(cfg, services)
    instances = instances[: cfg.limit] if cfg.limit else instances
    search, extractor = build_node(cfg.search, services), build_node(cfg.extractor, services)
    models = OmegaConf.masked_copy(cfg, ["search", "extractor"])
    provenance = {
        "backend": cfg.search._target_,
        "extractor": cfg.extractor._target_,
        "models": {path: str(node.get("model")) for path, node in find_model_specs(models)},
        "config_fingerprint": protocol_fingerprint(cfg),
        "cts_version": __import__("cts").__version__,
    }
    return gold_task(
        instances=instances,
        search=search,
        extractor=extractor,
        out_dir=Path(cfg.gold.out_dir),
        provenance=provenance,
        run=run_info(cfg),
        concurrency=cfg.concurrency,
        overwrite=bool(cfg.gold.overwrite),
        allow_partial=bool(cfg.gold.get("allow_partial", False)),
    )


def _robustness(cfg: DictConfig) -> dict[str, Any]:
    """The settings both robustness analyses share (``robustness.source``, ``budgets``)."""
    from cts.tasks.job import robustness_source

    budgets = cfg.robustness.get("budgets")
    return {
        "source": robustness_source(cfg),
        "budgets": None if budgets is None else list(budgets),
        "run": run_info(cfg),
        "out_dir": Path(cfg.paths.output_dir),
        "concurrency": cfg.get("concurrency", 8),
    }


def judge_robustness(cfg: DictConfig, services: Services) -> None:
    """Task ``judge_robustness``: build the dataset's gold and the judges, re-judge the source runs."""
    from cts.tasks.judge_robustness import judge_robustness_task

    rcfg = cfg.robustness
    gold = task_input(cfg, services).gold
    judges = {str(name): build_node(node, services) for name, node in rcfg.judges.items()}
    judge_robustness_task(
        gold=gold,
        judges=judges,
        reference=rcfg.get("reference"),
        include_recorded=bool(rcfg.get("include_recorded", True)),
        **_robustness(cfg),
    )


def backbone_stability(cfg: DictConfig, services: Services) -> None:
    """Task ``backbone_stability``: build the dataset and the backbones, replay the source runs' questions."""
    from cts.analysis.backbone_stability import Backbone
    from cts.compose.services import concretiser_places
    from cts.tasks.backbone_stability import backbone_stability_task

    instances = task_input(cfg, services).instances
    backbones = {
        str(name): Backbone(build_node(node.ua, services), build_node(node.rewriter, services))
        for name, node in cfg.robustness.backbones.items()
    }
    backbone_stability_task(
        instances=instances, backbones=backbones, places=concretiser_places(services), **_robustness(cfg)
    )


TASKS: dict[str, Callable[[DictConfig, Services], Any]] = {
    "cts.tasks.evaluate.evaluate_task": evaluate,
    "cts.tasks.gold.gold_task": gold,
    "cts.tasks.judge_robustness.judge_robustness_task": judge_robustness,
    "cts.tasks.backbone_stability.backbone_stability_task": backbone_stability,
}
"""``task._target_`` -> its composition: config -> the task's typed arguments, then the call."""
INPUTS: dict[str, Callable[[DictConfig, Services], Any]] = {
    "cts.tasks.evaluate.evaluate_task": _dataset,
    "cts.tasks.gold.gold_task": _gold_instances,
    "cts.tasks.judge_robustness.judge_robustness_task": _dataset,
    "cts.tasks.backbone_stability.backbone_stability_task": _dataset,
}
"""``task._target_`` -> what it reads from the dataset config (read before the run starts: :func:`preload_inputs`)."""
ROLE_GROUPS = ("clarifier", "ua", "rewriter", "search", "judge", "qtyper")


def build_services(cfg: DictConfig) -> Services:
    """The job's shared resources (corpus, index, LLM runtime), built lazily."""
    settings = OmegaConf.to_container(cfg.services, resolve=True)
    return Services(cache_dir=Path(cfg.paths.cache_dir).expanduser(), settings=settings)  # type: ignore[arg-type]


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
    log.info("built %s", node._target_)
    return obj


def _plain_value(value: Any, services: Services) -> Any:
    if isinstance(value, DictConfig):
        if "_target_" in value:
            return build_node(value, services)
        return {str(k): _plain_value(value[k], services) for k in value}
    if isinstance(value, ListConfig):
        return [_plain_value(v, services) for v in value]
    return value
