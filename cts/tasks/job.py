"""Where a job sits and what it leaves behind: its context, summary, resume check and MLflow run.

Shared by every task. The composition layer reads the config (:mod:`cts.compose.job_config`) into
the plain records here (:class:`JobContext`, :class:`Tracking`, :class:`RunInfo`) and hands each
task's composer a :class:`cts.tasks.registry.TaskContext`; no task module reads the config.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cts import tracking
from cts._util.secrets import scrub_tree
from cts._util.yamlfast import config_yaml
from cts.core.errors import ResumeRefused
from cts.core.records import infra_stop
from cts.protocol.job_files import RECORDS_FILE
from cts.protocol.outcome import stop_reason, stop_task
from cts.protocol.spend import SpendLimit

UNLIMITED = SpendLimit(None, 120.0, lambda usd, where: None)
"""No spend limit (a caller outside a composed job)."""


@dataclass(frozen=True)
class JobContext:
    """Where a job sits in Hydra: choices, run name, dirs (fallbacks outside Hydra)."""

    choices: Mapping[str, str]
    run_name: str
    job_dir: Path
    sweep_dir: str
    overrides: tuple[str, ...] = ()
    """The job's task overrides (``hydra.overrides.task``), secrets masked (:func:`cts.compose.job_config.stored_overrides`)."""
    swept: tuple[str, ...] | None = ()
    """Keys the sweep varies (empty outside a multirun, None when the sweep did not record them)."""
    command: tuple[str, ...] = ()
    """The job's task overrides as given (secrets not masked): the command that resumes it."""

    @property
    def multirun(self) -> bool:
        """Whether the job runs inside a Hydra multirun (it has a sweep dir)."""
        return bool(self.sweep_dir)


@dataclass(frozen=True)
class Execution:
    """How a job runs beside what it measures: its bounds, and what it records and shares of its components.

    Attributes:
        spend_limit: The job's LLM spend limit (``services.llm.spend``; default none).
        concurrency: Instances in flight at once.
        limit: Run only the first ``limit`` instances (None = all).
        models: Per role, the model id it calls (recorded with every instance).
        orig_parts: What the orig arm depends on (a sweep's jobs with the same share it).
        resource_counters: Counters of the job's resources (tool-cache hits ...), read at the end.
    """

    spend_limit: SpendLimit = UNLIMITED
    concurrency: int = 8
    limit: int | None = None
    models: Mapping[str, str] = field(default_factory=dict)
    orig_parts: Mapping[str, Any] = field(default_factory=dict)
    resource_counters: Callable[[], Mapping[str, float]] = dict


@dataclass(frozen=True)
class Analysis:
    """What a post-hoc analysis reads and where it writes (``robustness.source``, ``probes.source`` ...).

    Attributes:
        source: A sweep dir, job dirs, or an MLflow experiment name (found with the run's tracking URI).
        out_dir: Where its tables go (the job dir).
        budgets: The k values of the source jobs to keep (None = all).
        concurrency: Model calls in flight at once.
    """

    source: str | Sequence[str]
    out_dir: Path
    budgets: Sequence[int] | None = None
    concurrency: int = 8


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


@dataclass(frozen=True)
class RunInfo:
    """What every task needs to track its run (built by the composition layer).

    Attributes:
        context: Where the job sits in Hydra.
        tracking: The MLflow settings.
        config: The resolved config: logged as params, written as ``config.yaml`` (never read by a task).
        tags: The job's tags (:func:`cts.compose.job_config.job_tags`).
    """

    context: JobContext
    tracking: Tracking
    config: Mapping[str, Any]
    tags: Mapping[str, str]


def check_resume(out_dir: Path, fingerprint: str, config: Mapping[str, Any] | None = None) -> None:
    """Refuse to resume into a dir whose records came from a different protocol config.

    The protocol config is stored beside the fingerprint, so a refusal names the keys that differ.
    A dir whose stored config differs only by keys renamed since (:mod:`cts.compat.config`)
    resumes, and its ``fingerprint.json`` is rewritten in today's names (the old hash kept as
    ``migrated_from``).
    """
    path = out_dir / "fingerprint.json"
    records = out_dir / RECORDS_FILE
    stored: dict[str, Any] = {}
    if path.exists() and records.exists() and records.stat().st_size > 0:  # no records: nothing to protect
        stored = json.loads(path.read_text())
        if stored["fingerprint"] != fingerprint and not renamed_only(stored, config):
            raise ResumeRefused(resume_refusal(out_dir, stored, fingerprint, config))
    out_dir.mkdir(parents=True, exist_ok=True)
    entry: dict[str, Any] = {"fingerprint": fingerprint, "config": config}
    if stored and stored["fingerprint"] != fingerprint:
        entry["migrated_from"] = stored.get("migrated_from", []) + [stored["fingerprint"]]
    elif stored.get("migrated_from"):
        entry["migrated_from"] = stored["migrated_from"]
    path.write_text(json.dumps(entry, default=str, ensure_ascii=False))


def renamed_only(stored: Mapping[str, Any], config: Mapping[str, Any] | None) -> bool:
    """Whether the stored protocol config is ``config`` under the names of an older version."""
    from cts.compat.config import migrate, same_config

    old = stored.get("config")
    return isinstance(old, Mapping) and config is not None and same_config(migrate(old), config)


def resume_refusal(out_dir: Path, stored: Mapping[str, Any], fingerprint: str, config: Mapping[str, Any] | None) -> str:
    """The message of a refused resume: the fingerprints and every key that differs."""
    from cts._util.confdiff import config_diff

    head = (
        f"{out_dir} holds records of another configuration (fingerprint {stored['fingerprint']} != "
        f"{fingerprint}); use a fresh output dir."
    )
    if not isinstance(stored.get("config"), Mapping) or config is None:
        return head + " (the dir predates stored configs: the differing keys are unknown)"
    from cts.compat.config import migrate

    lines = "\n".join(f"  {line}" for line in config_diff(migrate(stored["config"]), config))
    return f"{head}\nKeys that differ (stored -> now):\n{lines}"


@contextlib.contextmanager
def tracked_task(run: RunInfo, task: str) -> Iterator[str]:
    """Track a non-evaluate task (build_gold, robustness analyses) as one MLflow run, open while the task works.

    The run ends ``FINISHED``, ``KILLED`` on SIGINT, else ``FAILED``. An infrastructure
    failure (:func:`cts.core.records.infra_stop`: the spend limit, an open circuit breaker, a dead
    or failing endpoint, a broken cache) ends the run ``FAILED`` with the tag
    ``stop_reason``, and the task with one line and exit status 1 instead of a traceback.

    Yields:
        The run id; log into it with :func:`log_task_outputs`.
    """
    tags = {**run.tags, "cts.kind": task}
    try:
        with tracking.open_mlflow_run(
            tracking.Experiment(run.tracking.uri, run.tracking.experiment),
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
        stop_task(task, e, multirun=run.context.multirun)


def log_task_outputs(metrics: Mapping[str, float], artifacts: list[Path]) -> None:
    """Log a task's metrics and files into its run (inside :func:`tracked_task`).

    Args:
        artifacts: The files the task wrote (not whole directories, which may hold the store).
    """
    tracking.log_metrics(metrics)
    tracking.log_artifacts(artifacts)


def write_config(run: RunInfo) -> Path:
    """Write the job's resolved config, secrets masked, as ``config.yaml`` (at the job's start: it is fixed by then)."""
    path = run.context.job_dir / "config.yaml"
    path.write_text(config_yaml(scrub_tree(dict(run.config))))
    return path


def write_summary(
    run: RunInfo, k: int, metrics: Mapping[str, float], run_id: str, stop: str, extra: Mapping[str, Any] | None = None
) -> Path:
    """Write ``summary.json`` (plus ``extra`` entries, e.g. how the CI was computed)."""
    ctx = run.context
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
