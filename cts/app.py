"""Composition: config -> services and components -> task -> tracking.

This is the one place that instantiates config options (each with ``services=``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from cts import tracking
from cts.metrics import summarize
from cts.pipeline import RECORDS_FILE, TRACES_FILE, Roles, run_job
from cts.services import Services

log = logging.getLogger(__name__)

ROLE_GROUPS = ("clarifier", "ua", "rewriter", "search", "judge", "qtyper")
OFFLINE_COMMAND = "python run.py experiment=offline"
# Keys that change where things go or how fast, not what is measured.
_NON_PROTOCOL_KEYS = ("paths", "tracking", "concurrency", "limit", "hydra", "task", "sweep_report")
_LLM_OPERATIONAL = ("concurrency_per_endpoint", "timeout_s", "max_attempts", "backoff", "cache", "budget",
                    "tracing", "transport")


def run(cfg: DictConfig) -> float | None:
    """Entry point called by ``run.py``: pre-flight, then run the configured task."""
    preflight(cfg, groups=task_groups(cfg))
    return run_task(cfg, build_services(cfg))


def run_task(cfg: DictConfig, services: Services) -> float | None:
    """Instantiate the configured task function and call it."""
    node = OmegaConf.masked_copy(cfg.task, [k for k in cfg.task if k != "preflight"])
    return instantiate(node)(cfg=cfg, services=services)  # type: ignore[no-any-return]


def task_groups(cfg: DictConfig) -> tuple[str, ...]:
    """The config keys whose models the task calls (``task.preflight``), plus ``services``."""
    return (*cfg.task.get("preflight", ()), "services")


def build_services(cfg: DictConfig) -> Services:
    """The job's shared resources (corpus, index, LLM runtime), built lazily."""
    settings = OmegaConf.to_container(cfg.services, resolve=True)
    return Services(cache_dir=Path(cfg.paths.cache_dir).expanduser(), settings=settings)  # type: ignore[arg-type]


def build_node(node: Any, services: Services) -> Any:
    """Instantiate one config option (a node with ``_target_``), passing the shared services.

    The single place where components are built: every factory takes ``services=``.
    """
    obj = instantiate(node, services=services)
    log.info("built %s", node.get("_target_"))
    return obj


def role_models(cfg: DictConfig) -> dict[str, str]:
    """Per role: the model id it calls (``<group>.model.model``), or the baseline's class."""
    out = {}
    for group in ROLE_GROUPS:
        model = OmegaConf.select(cfg, f"{group}.model.model", default=None)
        out[group] = str(model or cfg[group]._target_.rsplit(".", 1)[-1])
    return out


def build_roles(cfg: DictConfig, services: Services) -> Roles:
    """Instantiate the clarifier, UA, rewriter, search backend, judge and question typer."""
    return Roles(**{g: build_node(cfg[g], services) for g in ROLE_GROUPS})


@dataclass(frozen=True)
class JobContext:
    """Where a job sits in Hydra: choices, run name, dirs (fallbacks outside Hydra)."""

    choices: Mapping[str, str]
    run_name: str
    job_dir: Path
    sweep_dir: str


def job_context(cfg: DictConfig) -> JobContext:
    """Read the Hydra runtime (or fall back to config values when run without it)."""
    out = Path(cfg.paths.output_dir)
    if not HydraConfig.initialized():
        return JobContext({}, f"k{cfg.k}", out, "")
    hc = HydraConfig.get()
    choices = {g: str(v) for g, v in hc.runtime.choices.items() if not g.startswith("hydra") and v}
    name = hc.job.override_dirname or f"{choices.get('clarifier', 'run')},k={cfg.k}"
    sweep = str(hc.sweep.dir) if hc.mode and hc.mode.name == "MULTIRUN" else ""
    return JobContext(choices, name, out, sweep)


def preflight(cfg: DictConfig, groups: tuple[str, ...] | None = None) -> None:
    """Fail fast, before anything runs, when a role's model cannot be reached.

    Args:
        cfg: The composed config.
        groups: Only check these top-level keys (None = the whole config).
    """
    stop_on_problems(preflight_problems_of(cfg, groups))


def preflight_problems_of(cfg: DictConfig, groups: tuple[str, ...] | None = None) -> list[str]:
    """The pre-flight problems of one composed config (see :mod:`cts.llm.preflight`)."""
    from cts.llm.preflight import preflight_problems

    return preflight_problems(OmegaConf.masked_copy(cfg, list(groups)) if groups else cfg)


def stop_on_problems(problems: list[str]) -> None:
    """Exit non-zero with one message listing every problem (nothing has run yet)."""
    if problems:
        lines = "\n".join(f"  - {p}" for p in dict.fromkeys(problems))
        sys.exit(
            f"cts pre-flight failed; nothing was run:\n{lines}\n"
            f"Set the variables above (or point every role at one OpenAI-compatible server with "
            f"services.llm.api_base=URL), or run the offline stack: {OFFLINE_COMMAND}"
        )


def protocol_fingerprint(cfg: DictConfig) -> str:
    """Hash of everything that changes what a job measures (not where it writes)."""
    keys = [k for k in cfg if k not in _NON_PROTOCOL_KEYS]
    try:  # resolved, so that a dataset path or an endpoint read from the environment counts too
        data = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=True)
    except Exception:  # noqa: BLE001 - e.g. ${hydra:...} outside a Hydra run: the written config
        data = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=False)
    assert isinstance(data, dict)
    kept = dict(data)
    llm = dict(kept.get("services", {}).get("llm") or {})
    kept["services"] = {**kept.get("services", {}), "llm": {k: v for k, v in llm.items() if k not in _LLM_OPERATIONAL}}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_resume(out_dir: Path, fingerprint: str) -> None:
    """Refuse to resume into a dir whose records came from a different protocol config."""
    path = out_dir / "fingerprint.json"
    if path.exists():
        old = json.loads(path.read_text())["fingerprint"]
        if old != fingerprint:
            raise SystemExit(
                f"{out_dir} holds records of another configuration (fingerprint {old} != {fingerprint}); "
                "use a fresh output dir."
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"fingerprint": fingerprint}))


def evaluate_task(cfg: DictConfig, services: Services) -> float | None:
    """Run the protocol (system + orig arms) over the dataset and track the job.

    Returns:
        The job's mean restore_score_100 (Hydra's sweep metric).
    """
    if not isinstance(cfg.k, int) or cfg.k < 1:
        raise SystemExit(f"k must be a positive integer (the paper uses 1, 2, 3), got {cfg.k!r}")
    ctx = job_context(cfg)
    check_resume(ctx.job_dir, protocol_fingerprint(cfg))
    dataset = build_node(cfg.dataset, services)
    instances = list(dataset.instances)[: cfg.limit] if cfg.limit else list(dataset.instances)
    roles = build_roles(cfg, services)
    if cfg.services.llm.get("tracing"):
        tracking.trace_llm_calls(services.llm)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    tags = job_tags(cfg, ctx)
    with tracking.job_run(cfg.tracking.uri, cfg.tracking.experiment, ctx.run_name,
                          tracking.flatten(resolved), tags) as run_id:
        records, stop = asyncio.run(
            run_job(instances, dataset.gold, roles, k=cfg.k, out_dir=ctx.job_dir,
                    concurrency=cfg.concurrency, usage_scope=services.usage_scope, models=role_models(cfg))
        )
        metrics = {**summarize(records, k=cfg.k, seed=cfg.seed, **cfg.stats), **services.stats()}
        summary = write_summary(cfg, ctx, resolved, metrics, run_id, stop)
        tracking.log_metrics(metrics)
        tracking.set_tags({f"cts.prompt.{n}": v for n, v in services.prompt_versions().items()})
        tracking.log_artifacts([ctx.job_dir / RECORDS_FILE, ctx.job_dir / TRACES_FILE, summary,
                                ctx.job_dir / "config.yaml"])
        tracking.log_artifacts(services.prompt_files(), artifact_path="prompts")
    print_metrics(ctx.run_name, metrics)
    return metrics["score_mean"]


def gold_task(cfg: DictConfig, services: Services) -> float:
    """Build the static gold once per ``fused_query`` and archive it read-only (paper 4.2).

    The configured ``search`` backend runs on each intent query, the configured
    ``extractor`` turns its answer and evidence into weighted nuggets; instances
    whose gold does not validate are reported, not written.

    Returns:
        The number of instances with archived gold.
    """
    from cts.data import read_instances_jsonl
    from cts.gold import build_gold_archive
    from cts.llm.preflight import find_model_specs

    instances = read_instances_jsonl(cfg.gold.instances, cfg.gold.get("fields"))
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
    report = asyncio.run(build_gold_archive(
        instances, search, extractor, cfg.gold.out_dir, provenance={**provenance, "prompts": services.prompt_versions()},
        concurrency=cfg.concurrency, overwrite=cfg.gold.overwrite,
    ))
    counts = {"n_instances": report.n_instances, "n_gold": report.n_gold, "n_failures": len(report.failures)}
    archive = sorted(p for p in Path(report.out_dir).iterdir() if p.is_file())
    log_task_run(cfg, "gold", {k: float(v) for k, v in counts.items()}, archive)
    print(f"gold archive {report.out_dir}: {counts}, sha256 {report.gold_sha256[:12]}", flush=True)
    for instance_id, reason in report.failures:
        print(f"  no gold for {instance_id}: {reason}", flush=True)
    return float(report.n_gold)


def log_task_run(cfg: DictConfig, task: str, metrics: Mapping[str, float], artifacts: list[Path]) -> str:
    """Track a non-evaluate task (gold, robustness analyses) as one MLflow run.

    Args:
        artifacts: The files the task wrote (not whole directories, which may hold the store).
    """
    ctx = job_context(cfg)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    tags = {**job_tags(cfg, ctx), "cts.kind": task}
    with tracking.job_run(cfg.tracking.uri, cfg.tracking.experiment, f"{task}:{ctx.run_name}",
                          tracking.flatten(resolved), tags) as run_id:
        tracking.log_metrics(metrics)
        tracking.log_artifacts(artifacts)
    return run_id


def job_tags(cfg: DictConfig, ctx: JobContext) -> dict[str, str]:
    """Tags the report and notebooks select runs by."""
    tags = {
        "cts.kind": "job",
        "cts.job_dir": str(ctx.job_dir),
        "cts.sweep_dir": ctx.sweep_dir,
        "cts.system": ctx.choices.get("clarifier", ""),
        "cts.k": str(cfg.k),
    }
    tags.update({f"cts.choice.{g}": v for g, v in ctx.choices.items()})
    return tags


def write_summary(
    cfg: DictConfig, ctx: JobContext, resolved: dict[str, Any], metrics: Mapping[str, float],
    run_id: str, stop: str,
) -> Path:
    """Write ``summary.json`` and the resolved ``config.yaml`` into the job dir."""
    (ctx.job_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(resolved)))
    summary = {
        "metrics": {k: (v if math.isfinite(v) else None) for k, v in metrics.items()},
        "choices": dict(ctx.choices),
        "k": cfg.k,
        "stop_reason": stop,
        "run_name": ctx.run_name,
        "job_dir": str(ctx.job_dir),
        "sweep_dir": ctx.sweep_dir,
        "run_id": run_id,
        "experiment": cfg.tracking.experiment,
        "tracking_uri": cfg.tracking.uri,
    }
    path = ctx.job_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    return path


_TABLE_KEYS = (
    "n_instances", "n_unscored", "n_errors", "score_mean", "score_p50", "score_p90", "score_min",
    "score_max", "orig_score_mean", "delta_mean", "delta_ci_low", "delta_ci_high",
    "ua_unknown_rate", "all_unknown_rate", "cq_region_rate", "llm_calls", "cache_hits", "cost_usd",
)


def print_metrics(name: str, metrics: Mapping[str, float]) -> None:
    """Print a short table of the job's main metrics."""
    width = max(len(k) for k in _TABLE_KEYS)
    lines = [f"== {name} =="]
    for key in _TABLE_KEYS:
        if key in metrics:
            v = metrics[key]
            lines.append(f"{key:<{width}}  {v:,.0f}" if key.startswith("n_") else f"{key:<{width}}  {v:.3f}")
    print("\n".join(lines), flush=True)
