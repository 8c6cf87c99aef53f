"""Composition: config -> services and components -> task -> tracking.

This is the one place that builds components from config options (:func:`build_node`); a
component receives exactly what its signature asks for (a chat client, the index, the
corpus ...: :func:`cts.services.component_arguments`), never the job's services.
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from cts.services import Services, component_arguments, resource_parameters
from cts.tasks.job import in_multirun

if TYPE_CHECKING:
    from cts.budget import Budget
    from cts.pipeline import Roles
    from cts.tasks.job import RunInfo

log = logging.getLogger(__name__)

OFFLINE_COMMAND = "python run.py experiment=offline"
_KEY_PROBLEM = " takes no argument "
_RULE_PROBLEM = " does not accept `"
_INSTANTIATE_KEYS = frozenset({"_target_", "_partial_", "_recursive_", "_convert_", "_args_"})


def run(cfg: DictConfig) -> float | None:
    """Entry point called by ``run.py``: pre-flight, then run the configured task.

    Bad input (a broken dataset, an unset mandatory key ...) exits 1 with one line
    per problem (see :mod:`cts.errors`); prompts are recorded per job. The endpoints
    are probed here for a single run; a multirun probes every job's endpoints once in
    the launching process (``cts.callbacks``), before any job starts.
    """
    from cts.errors import InputError, input_errors, missing_values
    from cts.prompts import prompt_scope
    from cts.startup import end_startup_gc
    from cts.sweep import current_session

    if current_session() is None:  # a sweep's session does it once all its jobs are set up
        end_startup_gc()
    with input_errors(cfg), prompt_scope():
        if missing := missing_values(cfg):
            raise InputError(missing)
        preflight(cfg, groups=task_groups(cfg))
        if not in_multirun():
            probe_endpoints([cfg])
            probe_completions([cfg])
        return run_task(cfg, build_services(cfg))


def probe_endpoints(cfgs: Sequence[DictConfig]) -> None:
    """Probe every distinct endpoint of these jobs once; exit 1 naming each dead one.

    Jobs with ``services.llm.preflight_probe=false`` are not probed (see :mod:`cts.llm.preflight`);
    an endpoint that answered once in this process is not probed again.
    """
    from cts.llm.preflight import endpoints_of, probe_problems

    jobs = [OmegaConf.masked_copy(c, list(task_groups(c))) for c in cfgs
            if OmegaConf.select(c, "services.llm.preflight_probe", default=True)]
    endpoints = [e for e in endpoints_of(jobs) if (e.api_base, e.api_key) not in _PROBED]
    if not endpoints:
        return
    timeout = float(OmegaConf.select(jobs[0], "services.llm.preflight_timeout_s", default=5.0))
    problems = probe_problems(endpoints, timeout)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        sys.exit(
            f"cts pre-flight failed; nothing was run:\n{lines}\n"
            "Start the server or correct its URL (services.llm.api_base, or the model's api_base); "
            "services.llm.preflight_probe=false skips this check."
        )
    _PROBED.update((e.api_base, e.api_key) for e in endpoints)


_PROBED: set[tuple[str, str | None]] = set()
_COMPLETED: set[str] = set()


def probe_completions(cfgs: Sequence[DictConfig]) -> None:
    """One minimal completion per distinct request of these jobs; exit 1 naming each failure.

    Runs after :func:`probe_endpoints` (a dead server fails there, for free); see
    :mod:`cts.llm.completion_probe`. Its cost is printed on stderr.
    """
    from cts.llm.completion_probe import check_completions

    jobs = [OmegaConf.masked_copy(c, list(task_groups(c))) for c in cfgs]
    if not jobs:
        return
    cache_dir = Path(str(OmegaConf.select(cfgs[0], "paths.cache_dir", default=".")))
    problems, report = check_completions(jobs, cache_dir, _COMPLETED)
    if report:
        print(report, file=sys.stderr, flush=True)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        sys.exit(
            f"cts pre-flight failed (a minimal completion per model); nothing was run:\n{lines}\n"
            "Fix the model file (conf/model/<name>.yaml: params, request) or the role's params; "
            "services.llm.preflight_completion=false skips this check."
        )


def run_task(cfg: DictConfig, services: Services) -> float | None:
    """Turn the config into the configured task's typed arguments (building its components), then run it."""
    target = str(cfg.task._target_)
    compose = TASKS.get(target)
    if compose is None:
        raise ValueError(f"task._target_={target} is not a cts task (known: {', '.join(sorted(TASKS))})")
    return compose(cfg, services)


def build_roles(cfg: DictConfig, services: Services) -> Roles:
    """Build the clarifier, UA, rewriter, search backend, judge and question typer."""
    from cts.pipeline import Roles

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
    from cts.budget import Budget

    llm = services.settings.get("llm") or {}
    cap = (llm.get("budget") or {}).get("max_usd")
    return Budget(None if cap is None else float(cap), float(llm.get("timeout_s") or 120.0),
                  lambda usd, job_dir: services.llm.count_prior_spend(usd, job_dir))


def evaluate(cfg: DictConfig, services: Services) -> float | None:
    """Task ``evaluate``: check the job dir, build the dataset and roles, run the protocol."""
    from cts import tracking
    from cts.interrupt import resume_command
    from cts.tasks.evaluate import EvalProtocol, Resume, check_job, evaluate_task
    from cts.tasks.job import (
        job_context,
        orig_parts,
        protocol_config,
        protocol_fingerprint,
        task_overrides,
    )

    job_dir = job_context(cfg).job_dir
    resume = Resume(protocol_fingerprint(cfg), protocol_config(cfg), resume_command(task_overrides(), job_dir),
                    in_multirun())
    check_job(cfg.k, job_dir, resume)
    dataset = build_node(cfg.dataset, services)
    roles = build_roles(cfg, services)
    if cfg.services.llm.get("tracing"):
        tracking.trace_llm_calls(services.llm)
    stats = OmegaConf.to_container(cfg.stats, resolve=True)
    assert isinstance(stats, dict)
    return evaluate_task(
        dataset=dataset, roles=roles, protocol=EvalProtocol(cfg.k, cfg.seed, stats), run=run_info(cfg),
        resume=resume, budget=llm_budget(services), models=role_models(cfg), orig_parts=orig_parts(cfg),
        limit=cfg.limit, concurrency=cfg.concurrency, resource_stats=services.stats,
    )


def gold(cfg: DictConfig, services: Services) -> float:
    """Task ``gold``: read the instances, build search and extractor, archive their gold."""
    from cts.data import MAX_FIELD_CHARS, read_instances_jsonl
    from cts.llm.preflight import find_model_specs
    from cts.tasks.gold import gold_task
    from cts.tasks.job import protocol_fingerprint

    ds = cfg.dataset
    instances = read_instances_jsonl(ds.path, ds.get("fields"), ds.get("max_field_chars", MAX_FIELD_CHARS))
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
    return gold_task(instances=instances, search=search, extractor=extractor, out_dir=Path(cfg.gold.out_dir),
                     provenance=provenance, run=run_info(cfg), concurrency=cfg.concurrency,
                     overwrite=bool(cfg.gold.overwrite), allow_partial=bool(cfg.gold.get("allow_partial", False)))


def _robustness(cfg: DictConfig) -> dict[str, Any]:
    """The settings both robustness analyses share (``robustness.source``, ``budgets``)."""
    from cts.tasks.job import robustness_source

    budgets = cfg.robustness.get("budgets")
    return {"source": robustness_source(cfg), "budgets": None if budgets is None else list(budgets),
            "run": run_info(cfg), "out_dir": Path(cfg.paths.output_dir), "concurrency": cfg.get("concurrency", 8)}


def judge_robustness(cfg: DictConfig, services: Services) -> None:
    """Task ``judge_robustness``: build the dataset's gold and the judges, re-judge the source runs."""
    from cts.tasks.judge_robustness import judge_robustness_task

    rcfg = cfg.robustness
    gold = build_node(cfg.dataset, services).gold
    judges = {str(name): build_node(node, services) for name, node in rcfg.judges.items()}
    judge_robustness_task(gold=gold, judges=judges, reference=rcfg.get("reference"),
                          include_recorded=bool(rcfg.get("include_recorded", True)), **_robustness(cfg))


def backbone_stability(cfg: DictConfig, services: Services) -> None:
    """Task ``backbone_stability``: build the dataset and the backbones, replay the source runs' questions."""
    from cts.analysis.backbone_stability import Backbone
    from cts.services import concretiser_places
    from cts.tasks.backbone_stability import backbone_stability_task

    instances = build_node(cfg.dataset, services).instances
    backbones = {str(name): Backbone(build_node(node.ua, services), build_node(node.rewriter, services))
                 for name, node in cfg.robustness.backbones.items()}
    backbone_stability_task(instances=instances, backbones=backbones, places=concretiser_places(services),
                            **_robustness(cfg))


TASKS: dict[str, Callable[[DictConfig, Services], Any]] = {
    "cts.tasks.evaluate.evaluate_task": evaluate,
    "cts.tasks.gold.gold_task": gold,
    "cts.tasks.judge_robustness.judge_robustness_task": judge_robustness,
    "cts.tasks.backbone_stability.backbone_stability_task": backbone_stability,
}
"""``task._target_`` -> its composition: config -> the task's typed arguments, then the call."""
ROLE_GROUPS = ("clarifier", "ua", "rewriter", "search", "judge", "qtyper")


def task_groups(cfg: DictConfig) -> tuple[str, ...]:
    """The config keys whose models the task calls (``task.preflight``), plus ``services``."""
    return (*cfg.task.get("preflight", ()), "services")


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


def preflight(cfg: DictConfig, groups: tuple[str, ...] | None = None) -> None:
    """Fail fast, before anything runs, when a role's model cannot be reached.

    Args:
        cfg: The composed config.
        groups: Only check these top-level keys (None = the whole config).
    """
    stop_on_problems(preflight_problems_of(cfg, groups))


def preflight_problems_of(cfg: DictConfig, groups: tuple[str, ...] | None = None) -> list[str]:
    """The pre-flight problems of one composed config: unknown keys, unreachable models."""
    from cts.llm.preflight import preflight_problems
    from cts.llm.rulecheck import rule_problems

    components = OmegaConf.masked_copy(cfg, [k for k in cfg if k not in ("hydra", "task")])
    scoped = OmegaConf.masked_copy(cfg, list(groups)) if groups else cfg
    return unknown_key_problems(components) + preflight_problems(scoped) + rule_problems(scoped)


def unknown_key_problems(node: Any, path: str = "") -> list[str]:
    """One message per config key that no component accepts (a typo such as ``judge.treshold``).

    Every node with a ``_target_`` is checked against the signature of what it builds;
    a target taking ``**kwargs`` accepts anything and is not checked.
    """
    problems: list[str] = []
    if isinstance(node, DictConfig):
        keys = [str(k) for k in node.keys()]
        if "_target_" in keys:
            problems += _unknown_keys(node, keys, path)
        for key in keys:
            if not OmegaConf.is_missing(node, key) and isinstance(node._get_node(key), (DictConfig, ListConfig)):
                problems += unknown_key_problems(node[key], f"{path}.{key}" if path else key)
    elif isinstance(node, ListConfig):
        for i, item in enumerate(node):
            problems += unknown_key_problems(item, f"{path}[{i}]")
    return problems


def _unknown_keys(node: DictConfig, keys: list[str], path: str) -> list[str]:
    target = str(node._get_node("_target_")._value())
    try:
        obj = get_object(target)
        params = inspect.signature(obj).parameters
    except (ImportError, AttributeError, ValueError, TypeError) as e:
        return [f"{path}._target_: cannot load {target} ({e})"]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    configurable = set(params) - resource_parameters(obj) - {"self"}  # resources are never config keys
    known = configurable | _INSTANTIATE_KEYS
    return [f"{path}.{k}: {target}{_KEY_PROBLEM}{k!r} (it takes: {', '.join(sorted(configurable))})"
            for k in keys if k not in known]


def _is_key_problem(problem: str) -> bool:
    return _KEY_PROBLEM in problem or "._target_: cannot load " in problem


def stop_on_problems(problems: list[str]) -> None:
    """Exit non-zero with one message listing every problem (nothing has run yet)."""
    if not problems:
        return
    lines = "\n".join(f"  - {p}" for p in dict.fromkeys(problems))
    hints = []
    if any(_is_key_problem(p) for p in problems):
        hints.append("Correct or remove the config keys above.")
    if any(_RULE_PROBLEM in p for p in problems):  # cts.llm.rulecheck
        hints.append("Change or remove the parameters above; the model file's `request:` node cites each rule.")
    if not all(_is_key_problem(p) or _RULE_PROBLEM in p for p in problems):
        hints.append("Set the variables above (or point every role at one OpenAI-compatible server with "
                     f"services.llm.api_base=URL), or run the offline stack: {OFFLINE_COMMAND}")
    sys.exit(f"cts pre-flight failed; nothing was run:\n{lines}\n" + "\n".join(hints))


