"""Pre-flight anchor check: an LLM judge must score an empty answer 0 and the gold nuggets' own text 100.

Before any job of a launch, each distinct LLM judge of its jobs (a judge node with a model, a panel
with one) labels ``judge_anchors.instances`` instances twice (:mod:`cts.analysis.anchors`): a judge
that gives the empty answer more than ``empty_max`` or the gold answer less than ``gold_min`` stops
the launch with one ``error:`` line, before the sweep's money is spent. What it will call is said
before it runs, the scores after; the calls go through the response cache (a rerun pays nothing).
A judge with a local server (``services.local_llm``) is checked on a server started for the check.
``judge_anchors.check=false`` turns it off; an offline judge is never probed.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cts._util.launch import Preflight
from cts.core.errors import PreflightFailed

__all__ = ["check_anchors", "llm_judge_paths"]


def llm_judge_paths(cfg: DictConfig) -> list[str]:
    """The model paths under ``judge`` (empty for an offline judge)."""
    from cts.compose.model_checks import find_model_specs

    return [path for path, _ in find_model_specs(cfg) if path.startswith("judge.")]


def _checked(cfg: DictConfig) -> bool:
    from cts.compose.probes import task_groups

    wanted = bool(OmegaConf.select(cfg, "judge_anchors.check", default=False))
    return wanted and "judge" in task_groups(cfg) and bool(llm_judge_paths(cfg))


def _key(cfg: DictConfig) -> str:
    nodes = ("judge", "dataset", "judge_anchors", "services.local_llm", "services.llm.api_base", "limit")
    return "anchors:" + json.dumps(
        {n: OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(cfg, n)}), resolve=True) for n in nodes},
        sort_keys=True,
        default=str,
    )


def _judge_name(cfg: DictConfig) -> str:
    names = [str(OmegaConf.select(cfg, f"{p}.name", default=p)) for p in llm_judge_paths(cfg)]
    return ", ".join(dict.fromkeys(names))


def _scores(cfg: DictConfig, n: int) -> dict[str, list[tuple[str, float]]]:
    """Each anchor's scores on the dataset's first ``n`` instances, with the job's own judge and services."""
    from cts._util.loops import run as run_loop
    from cts.analysis.anchors import anchor_scores
    from cts.compose.app import build_node, build_services
    from cts.compose.model_checks import serves_locally
    from cts.compose.services import local_llm_served

    services = build_services(cfg)
    server = build_node(cfg.services.local_llm, services) if serves_locally(cfg) else None
    with tempfile.TemporaryDirectory(prefix="cts-anchors-") as tmp, local_llm_served(services, server, Path(tmp)) as s:
        gold = build_node(cfg.dataset, s).gold
        judge = build_node(cfg.judge, s)
        return run_loop(anchor_scores(dict(list(gold.items())[:n]), judge))


def _check_one(cfg: DictConfig) -> str:
    """Run one judge's anchors; the line of its scores (raises PreflightFailed when it fails)."""
    from cts.analysis.anchors import AnchorLimits, anchor_problems, anchor_rows
    from cts.stats.bootstrap import Resampling

    limits = AnchorLimits(float(cfg.judge_anchors.empty_max), float(cfg.judge_anchors.gold_min))
    n, name = int(cfg.judge_anchors.instances), _judge_name(cfg)
    print(
        f"cts pre-flight: anchor check of judge {name}: {2 * n} judge calls on {n} instance(s), an empty answer "
        f"must score <= {limits.empty_max:g} and the gold nuggets' text >= {limits.gold_min:g} "
        "(judge_anchors.check=false skips it)",
        file=sys.stderr,
        flush=True,
    )
    rows = anchor_rows(_scores(cfg, n), Resampling(1000, float(cfg.bootstrap.confidence)))
    shown = ", ".join(_shown(r) for r in rows.to_dict("records"))
    line = f"cts pre-flight: judge {name} anchors: {shown}"
    if problems := anchor_problems(rows, limits):
        print(line, file=sys.stderr, flush=True)
        raise PreflightFailed(
            f"error: judge {name} fails the anchor check: {'; '.join(problems)}. Its scores would measure nothing, "
            "so nothing was run: choose a judge that passes (docs/judges.md), or set judge_anchors.check=false"
        )
    return line


def _shown(r: dict[str, Any]) -> str:
    return f"{r['probe']} {r['score']:.2f} [{r['score_ci_low']:.2f}, {r['score_ci_high']:.2f}]"


def check_anchors(cfgs: Sequence[DictConfig], memo: Preflight | None = None) -> None:
    """Check each distinct LLM judge of these jobs once per launch (see the module docstring).

    Args:
        cfgs: The jobs' configs.
        memo: The launch's pre-flight memo; a judge checked in it is not checked again.

    Raises:
        PreflightFailed: A judge failed, in one ``error:`` line.
    """
    done = memo.completed if memo is not None else set()
    for cfg in cfgs:
        if not _checked(cfg) or (key := _key(cfg)) in done:
            continue
        print(_check_one(cfg), file=sys.stderr, flush=True)
        done.add(key)
