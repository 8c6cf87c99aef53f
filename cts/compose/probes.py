"""Pre-flight probes of a sweep's LLM endpoints: one GET per endpoint, one minimal completion per request.

Each runs once per launch for what it already checked (a sweep's jobs share the launch's
:class:`cts._util.launch.Preflight`); a problem exits 1 before anything is created, one line per
endpoint or model.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from cts._util.launch import Preflight
from cts.core.errors import PreflightFailed


def task_groups(cfg: DictConfig) -> tuple[str, ...]:
    """The config keys whose models the task calls, plus ``services``.

    The task declares them (``calls`` of :func:`cts.tasks.registry.task`); ``task.preflight=[...]`` overrides.
    """
    from cts.tasks.registry import task_spec

    listed = cfg.task.get("preflight")
    calls = task_spec(str(cfg.task._target_)).called() if listed is None else tuple(str(g) for g in listed)
    return (*calls, "services")


def scoped_copy(cfg: DictConfig, memo: Preflight | None = None) -> DictConfig:
    """The keys of ``cfg`` its task calls (:func:`task_groups`), as a masked copy made once per job and launch.

    Args:
        cfg: A job's composed config.
        memo: The launch's pre-flight memo, which keeps the copy for the launch's other checks (None: not kept).
    """
    hit = memo.scoped.get(id(cfg)) if memo is not None else None
    if hit is not None and hit[0] is cfg:
        return hit[1]
    copy = OmegaConf.masked_copy(cfg, list(task_groups(cfg)))
    if memo is not None:
        memo.scoped[id(cfg)] = (cfg, copy)
    return copy


def probe_endpoints(cfgs: Sequence[DictConfig], memo: Preflight | None = None) -> None:
    """Probe every distinct endpoint of these jobs once; exit 1 naming each dead one.

    Jobs with ``services.llm.preflight_probe=false`` are not probed (see :mod:`cts.compose.model_checks`);
    an endpoint that answered once in this launch is not probed again.

    Args:
        cfgs: The jobs' configs.
        memo: The launch's pre-flight memo (None: nothing probed yet, nothing kept).
    """
    from cts.compose.model_checks import endpoints_of, probe_problems

    jobs = [scoped_copy(c, memo) for c in cfgs if OmegaConf.select(c, "services.llm.preflight_probe", default=True)]
    memo = memo if memo is not None else Preflight()
    endpoints = [e for e in endpoints_of(jobs) if (e.api_base, e.api_key) not in memo.probed]
    if not endpoints:
        return
    timeout = float(OmegaConf.select(jobs[0], "services.llm.preflight_timeout_s", default=5.0))
    exit_on_probe_problems(
        "cts pre-flight failed",
        probe_problems(endpoints, timeout),
        "Start the server or correct its URL (services.llm.api_base, or the model's api_base); "
        "services.llm.preflight_probe=false skips this check.",
    )
    memo.probed.update((e.api_base, e.api_key) for e in endpoints)


def probe_completions(cfgs: Sequence[DictConfig], memo: Preflight | None = None) -> None:
    """One minimal completion per distinct request of these jobs; exit 1 naming each failure.

    Runs after :func:`probe_endpoints` (a dead server fails there, for free); see
    :mod:`cts.compose.completion_probe`. Its cost is printed on stderr.

    Args:
        cfgs: The jobs' configs.
        memo: The launch's pre-flight memo (None: nothing checked yet, nothing kept).
    """
    from cts.compose.completion_probe import check_completions, completion_hints

    jobs = [scoped_copy(c, memo) for c in cfgs]
    if not jobs:
        return
    cache_dir = Path(str(OmegaConf.select(cfgs[0], "paths.cache_dir", default=".")))
    failed, report = check_completions(jobs, cache_dir, (memo if memo is not None else Preflight()).completed)
    if report:
        print(report, file=sys.stderr, flush=True)
    exit_on_probe_problems(
        "cts pre-flight failed (a minimal completion per model)",
        [str(r.problem) for r in failed],
        # the model file only for a rejected request; a 5xx or a timeout is the endpoint's (#46)
        f"{completion_hints(failed)}\nservices.llm.preflight_completion=false skips this check.",
    )


def exit_on_probe_problems(head: str, problems: Sequence[str], hint: str) -> None:
    """Stop (exit 1) with ``head``, one line per problem and ``hint``; nothing when there is no problem."""
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise PreflightFailed(f"{head}; nothing was run:\n{lines}\n{hint}")
