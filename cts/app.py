"""Composition: config -> services and components -> task -> tracking.

This is the one place that builds components from config options (:func:`build_node`); a
component receives the job's services only when its signature asks for them.
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from cts.services import Services
from cts.tasks.job import in_multirun

log = logging.getLogger(__name__)

OFFLINE_COMMAND = "python run.py experiment=offline"
_KEY_PROBLEM = " takes no argument "
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

    with input_errors(cfg), prompt_scope():
        if missing := missing_values(cfg):
            raise InputError(missing)
        preflight(cfg, groups=task_groups(cfg))
        if not in_multirun():
            probe_endpoints([cfg])
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


def run_task(cfg: DictConfig, services: Services) -> float | None:
    """Instantiate the configured task function and call it with a builder bound to ``services``."""
    node = OmegaConf.masked_copy(cfg.task, [k for k in cfg.task if k != "preflight"])
    task = instantiate(node)
    return task(cfg=cfg, services=services, build=lambda n: build_node(n, services))  # type: ignore[no-any-return]


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
    component gets the job's ``services`` only when its signature asks for them.
    """
    if not (isinstance(node, DictConfig) and "_target_" in node):
        return _plain_value(node, services)
    target = get_object(str(node._target_))
    kwargs = {str(k): _plain_value(node[k], services) for k in node if not str(k).startswith("_")}
    if "services" in inspect.signature(target).parameters:
        kwargs["services"] = services
    obj = target(**kwargs)
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

    components = OmegaConf.masked_copy(cfg, [k for k in cfg if k not in ("hydra", "task")])
    scoped = OmegaConf.masked_copy(cfg, list(groups)) if groups else cfg
    return unknown_key_problems(components) + preflight_problems(scoped)


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
        params = inspect.signature(get_object(target)).parameters
    except (ImportError, AttributeError, ValueError, TypeError) as e:
        return [f"{path}._target_: cannot load {target} ({e})"]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    known = set(params) | _INSTANTIATE_KEYS
    return [f"{path}.{k}: {target}{_KEY_PROBLEM}{k!r} (it takes: {', '.join(sorted(set(params) - {'self'}))})"
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
    if not all(_is_key_problem(p) for p in problems):
        hints.append("Set the variables above (or point every role at one OpenAI-compatible server with "
                     f"services.llm.api_base=URL), or run the offline stack: {OFFLINE_COMMAND}")
    sys.exit(f"cts pre-flight failed; nothing was run:\n{lines}\n" + "\n".join(hints))


