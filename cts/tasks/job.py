"""Where a job sits and what it leaves behind: Hydra context, tags, summary, fingerprint, tracking.

Shared by every task. The composition layer (:mod:`cts.compose.app`) reads the config with the
``cfg`` helpers here (:func:`job_context`, :func:`job_tags`, :func:`protocol_config` ...) and
hands each task's composer a :class:`cts.tasks.registry.TaskContext`, from which it builds the
task's plain, typed arguments (a :class:`RunInfo`, built components); no task module reads the config.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from cts import tracking
from cts._util.naming import current_swept, override_items
from cts._util.secrets import scrub, scrub_tree
from cts.core.records import infra_stop
from cts.protocol.job_files import RECORDS_FILE
from cts.protocol.outcome import stop_reason, stop_task

# Keys that change where things go or how fast, not what is measured.
_NON_PROTOCOL_KEYS = (
    "paths",
    "tracking",
    "concurrency",
    "limit",
    "hydra",
    "task",
    "sweep_report",
    "debug",
    "gate",
    "repeats",
    "plan",
)  # the gate is applied after the fact, over finished records; more repeats resume into the same dir; the plan runs before them
_UNSET_DESIGN: dict[str, Any] = {"repeat_temperature": None, "repeat_stages": None, "arms": []}
"""Design keys left out of the protocol config at these values: a job dir from before them still resumes."""
_LLM_OPERATIONAL = (
    "concurrency_per_endpoint",
    "adaptive",
    "timeout_s",
    "max_attempts",
    "backoff",
    "cache",
    "budget",
    "tracing",
    "transport",
    "breaker_failures",
    "preflight_probe",
    "preflight_timeout_s",
    "api_base_price",
    "role_timeout_s",
    "max_timeout_attempts",
    "rate_limit_wait_s",
    "breaker_timeouts",
    "preflight_completion",
)
_LOCAL_LLM_OPERATIONAL = ("port", "startup_timeout_s", "stop_timeout_s")  # services.local_llm: where, not what


@dataclass(frozen=True)
class JobContext:
    """Where a job sits in Hydra: choices, run name, dirs (fallbacks outside Hydra)."""

    choices: Mapping[str, str]
    run_name: str
    job_dir: Path
    sweep_dir: str
    overrides: tuple[str, ...] = ()
    """The job's task overrides (``hydra.overrides.task``), secrets masked (:func:`stored_overrides`)."""
    swept: tuple[str, ...] | None = ()
    """Keys the sweep varies (empty outside a multirun, None when the sweep did not record them)."""


@dataclass(frozen=True)
class Tracking:
    """Where a job's MLflow run goes and what it logs besides metrics (``conf/tracking``)."""

    uri: str
    experiment: str
    records_table: bool = True
    instance_traces: bool = True
    """One MLflow trace per instance, with its scores, labels and gold as assessments."""
    evaluation_dataset: bool = True
    """Keep the dataset (queries, gold) as an MLflow evaluation dataset of the experiment, too."""
    experiment_kind: str | None = None
    """``mlflow.experimentKind`` of a new experiment: which views MLflow's UI opens it with."""


def tracking_settings(node: Mapping[str, Any]) -> Tracking:
    """The :class:`Tracking` of a ``tracking`` config node (keys it lacks take the defaults)."""
    keys = ("records_table", "instance_traces", "evaluation_dataset", "experiment_kind")
    return Tracking(str(node["uri"]), str(node["experiment"]), **{k: node[k] for k in keys if node.get(k) is not None})


@dataclass(frozen=True)
class RunInfo:
    """What every task needs to track its run (built by the composition layer).

    Attributes:
        context: Where the job sits in Hydra.
        tracking: The MLflow settings.
        config: The resolved config: logged as params, written as ``config.yaml`` (never read by a task).
        tags: The job's tags (:func:`job_tags`).
    """

    context: JobContext
    tracking: Tracking
    config: Mapping[str, Any]
    tags: Mapping[str, str]


def job_context(cfg: DictConfig) -> JobContext:
    """Read the Hydra runtime (or fall back to config values when run without it)."""
    out = Path(cfg.paths.output_dir)
    if not HydraConfig.initialized():
        return JobContext({}, f"k{cfg.k}", out, "")
    hc = HydraConfig.get()
    choices = {g: str(v) for g, v in hc.runtime.choices.items() if not g.startswith("hydra") and v}
    sweep = str(hc.sweep.dir) if hc.mode and hc.mode.name == "MULTIRUN" else ""
    name = job_run_name(list(hc.overrides.task), bool(sweep), f"clarifier={choices.get('clarifier', 'run')},k={cfg.k}")
    written = OmegaConf.to_container(hc.overrides.task, resolve=False)  # ${oc.env:KEY} stays unresolved
    assert isinstance(written, list)
    swept = current_swept() if sweep else ()
    return JobContext(choices, name, out, sweep, tuple(stored_overrides([str(o) for o in written])), swept)


def job_run_name(overrides: list[str], multirun: bool, fallback: str) -> str:
    """The MLflow run name: the swept factors in a multirun (as the job dir), else ``fallback``."""
    from cts._util.naming import current_swept, job_name

    swept = current_swept() if multirun else ()
    return job_name(overrides, swept, fallback) if swept != () else fallback


def stored_overrides(overrides: Sequence[str]) -> list[str]:
    """``overrides`` as ``summary.json`` and MLflow keep them: a secret's value masked, the rest as written."""
    out = []
    for text, (key, value) in zip(overrides, override_items(overrides)):
        safe = scrub(key, value)
        quoted = safe.replace("'", "\\'")  # a masked value keeps Hydra's syntax: the report parses it again
        out.append(text if safe == value else f"{key}='{quoted}'")
    return out


def in_multirun() -> bool:
    """Whether this process runs a job of a Hydra multirun."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def task_overrides() -> list[str]:
    """The job's command-line overrides (empty outside Hydra)."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def protocol_config(cfg: DictConfig) -> dict[str, Any]:
    """Everything that changes what a job measures (not where it writes), resolved."""
    keys = [str(k) for k in cfg if k not in _NON_PROTOCOL_KEYS]
    try:  # resolved, so that a dataset path or an endpoint read from the environment counts too
        data = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=True)
    except Exception:  # noqa: BLE001 - e.g. ${hydra:...} outside a Hydra run: the written config
        data = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=False)
    assert isinstance(data, dict)
    kept = {str(k): v for k, v in data.items() if k not in _UNSET_DESIGN or v != _UNSET_DESIGN[k]}
    llm = dict(kept.get("services", {}).get("llm") or {})
    kept["services"] = {**kept.get("services", {}), "llm": {k: v for k, v in llm.items() if k not in _LLM_OPERATIONAL}}
    if local := kept["services"].get("local_llm"):
        kept["services"]["local_llm"] = {k: v for k, v in local.items() if k not in _LOCAL_LLM_OPERATIONAL}
    if isinstance(kept.get("dataset"), dict):  # how the delta CI groups instances, not what a record holds
        kept["dataset"] = {k: v for k, v in kept["dataset"].items() if k != "cluster_field"}
    # Secrets masked: fingerprint.json stores this, and a rotated key measures the same thing.
    return scrub_tree(kept)


def protocol_fingerprint(cfg: DictConfig) -> str:
    """Hash of :func:`protocol_config`."""
    return hashlib.sha256(json.dumps(protocol_config(cfg), sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_resume(out_dir: Path, fingerprint: str, config: Mapping[str, Any] | None = None) -> None:
    """Refuse to resume into a dir whose records came from a different protocol config.

    The protocol config is stored beside the fingerprint, so a refusal names the keys that differ.
    """
    path = out_dir / "fingerprint.json"
    records = out_dir / RECORDS_FILE
    if path.exists() and records.exists() and records.stat().st_size > 0:  # no records: nothing to protect
        stored = json.loads(path.read_text())
        if stored["fingerprint"] != fingerprint:
            raise SystemExit(resume_refusal(out_dir, stored, fingerprint, config))
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"fingerprint": fingerprint, "config": config}, default=str, ensure_ascii=False))


def resume_refusal(out_dir: Path, stored: Mapping[str, Any], fingerprint: str, config: Mapping[str, Any] | None) -> str:
    """The message of a refused resume: the fingerprints and every key that differs."""
    from cts._util.confdiff import config_diff

    head = (
        f"{out_dir} holds records of another configuration (fingerprint {stored['fingerprint']} != "
        f"{fingerprint}); use a fresh output dir."
    )
    if not isinstance(stored.get("config"), Mapping) or config is None:
        return head + " (the dir predates stored configs: the differing keys are unknown)"
    lines = "\n".join(f"  {line}" for line in config_diff(stored["config"], config))
    return f"{head}\nKeys that differ (stored -> now):\n{lines}"


@contextlib.contextmanager
def tracked_task(run: RunInfo, task: str) -> Iterator[str]:
    """Track a non-evaluate task (gold, robustness analyses) as one MLflow run, open while the task works.

    The run ends ``FINISHED``, ``KILLED`` on SIGINT, else ``FAILED``. An infrastructure
    failure (:func:`cts.core.records.infra_stop`: the budget, an open circuit breaker, a dead
    or failing endpoint, a broken cache) ends the run ``FAILED`` with the tag
    ``stop_reason``, and the task with one line and exit status 1 instead of a traceback.

    Yields:
        The run id; log into it with :func:`log_task_outputs`.
    """
    tags = {**run.tags, "cts.kind": task}
    try:
        with tracking.open_mlflow_run(
            run.tracking.uri,
            run.tracking.experiment,
            f"{task}:{run.context.run_name}",
            tracking.flatten(dict(run.config)),
            tags,
        ) as run_id:
            try:
                yield run_id
            except Exception as e:
                if infra_stop(e):
                    tracking.set_tags({"stop_reason": stop_reason(e)})
                raise
    except Exception as e:
        if not infra_stop(e):
            raise
        stop_task(task, e, multirun=in_multirun())


def log_task_outputs(metrics: Mapping[str, float], artifacts: list[Path]) -> None:
    """Log a task's metrics and files into its run (inside :func:`tracked_task`).

    Args:
        artifacts: The files the task wrote (not whole directories, which may hold the store).
    """
    tracking.log_metrics(metrics)
    tracking.log_artifacts(artifacts)


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
    tags.update(tracking.override_tags(ctx.overrides, ctx.swept))
    return tags


def write_summary(
    run: RunInfo, k: int, metrics: Mapping[str, float], run_id: str, stop: str, extra: Mapping[str, Any] | None = None
) -> Path:
    """Write ``summary.json`` (plus ``extra`` entries, e.g. how the CI was computed) and ``config.yaml``."""
    ctx = run.context
    (ctx.job_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(scrub_tree(dict(run.config)))))
    summary = {
        "metrics": {k: (v if math.isfinite(v) else None) for k, v in metrics.items()},
        "choices": dict(ctx.choices),
        "k": k,
        "stop_reason": stop,
        "run_name": ctx.run_name,
        "overrides": list(ctx.overrides),
        "swept": None if ctx.swept is None else list(ctx.swept),
        "job_dir": str(ctx.job_dir),
        "sweep_dir": ctx.sweep_dir,
        "run_id": run_id,
        "experiment": run.tracking.experiment,
        "tracking_uri": run.tracking.uri,
        **(extra or {}),
    }
    path = ctx.job_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    return path


_TABLE_KEYS = (
    "n_instances",
    "n_unscored",
    "n_errors",
    "score_mean",
    "score_p50",
    "score_p90",
    "score_min",
    "score_max",
    "orig_score_mean",
    "delta_mean",
    "delta_ci_low",
    "delta_ci_high",
    "n_clusters",
    "design_effect",
    "ua_unknown_rate",
    "all_unknown_rate",
    "cq_region_rate",
    "llm_calls",
    "cache_hits",
    "cost_usd",
    "cost_total_usd",
    "n_missing",
    "n_infra_failures",
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


def prompt_files() -> list[Path]:
    """Prompt files the job's components loaded (logged with every run)."""
    from cts._util.prompts import used_prompts

    return [p.path for p in used_prompts().values() if p.path is not None]


def prompt_versions() -> dict[str, str]:
    """Name -> content hash of every prompt loaded, plus ``_all``: one hash over them."""
    from cts._util.prompts import prompts_version, used_prompts

    used = used_prompts()
    return {**{n: p.version for n, p in sorted(used.items())}, "_all": prompts_version()} if used else {}
