"""Task ``evaluate``: the clarify-then-search protocol (system + orig arms) over a dataset."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cts import tracking
from cts.budget import budget_metrics, run_within_budget, stop_note
from cts.data import dataset_metrics, select_instances
from cts.interrupt import interruptible_job
from cts.job_files import RECORDS_FILE, TRACES_FILE
from cts.metrics import metric_view, summarize
from cts.outcome import finish, read_outcome, resume_command
from cts.pipeline import Roles, run_job
from cts.records import Record, read_records
from cts.services import Services
from cts.sweep import orig_share_for, sweep_progress
from cts.tasks.job import (
    Build,
    check_resume,
    in_multirun,
    job_context,
    job_tags,
    orig_parts,
    print_metrics,
    protocol_config,
    protocol_fingerprint,
    task_overrides,
    write_summary,
)

log = logging.getLogger(__name__)

ROLE_GROUPS = ("clarifier", "ua", "rewriter", "search", "judge", "qtyper")


def role_models(cfg: DictConfig) -> dict[str, str]:
    """Per role: the model id it calls (``<group>.model.model``), or the baseline's class."""
    out = {}
    for group in ROLE_GROUPS:
        model = OmegaConf.select(cfg, f"{group}.model.model", default=None)
        out[group] = str(model or cfg[group]._target_.rsplit(".", 1)[-1])
    return out


def build_roles(cfg: DictConfig, build: Build) -> Roles:
    """Instantiate the clarifier, UA, rewriter, search backend, judge and question typer."""
    return Roles(**{g: build(cfg[g]) for g in ROLE_GROUPS})


def evaluate_task(cfg: DictConfig, services: Services, build: Build) -> float | None:
    """Run the protocol (system + orig arms) over the dataset and track the job.

    Returns:
        The job's mean restore_score_100 (Hydra's sweep metric).
    """
    if not isinstance(cfg.k, int) or cfg.k < 1:
        raise SystemExit(f"k must be a positive integer (the paper uses 1, 2, 3), got {cfg.k!r}")
    ctx = job_context(cfg)
    check_resume(ctx.job_dir, protocol_fingerprint(cfg), protocol_config(cfg))
    dataset = build(cfg.dataset)
    instances = select_instances(dataset, cfg.limit)
    roles = build_roles(cfg, build)
    if cfg.services.llm.get("tracing"):
        tracking.trace_llm_calls(services.llm)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    tags = job_tags(cfg, ctx)
    with interruptible_job(ctx.job_dir, len(instances), lambda: count_done(ctx.job_dir, instances), ctx.sweep_dir), \
            tracking.job_run(cfg.tracking.uri, cfg.tracking.experiment, ctx.run_name,
                             tracking.flatten(resolved), tags, job_dir=ctx.job_dir) as run_id:
        records, stop = run_within_budget(
            lambda: run_job(instances, dataset.gold, roles, k=cfg.k, out_dir=ctx.job_dir,
                            concurrency=cfg.concurrency, usage_scope=services.usage_scope, models=role_models(cfg),
                            keep=metric_view, on_instance=instance_tracer(cfg, tags),
                            progress=sweep_progress() or True, orig_share=orig_share_for(orig_parts(cfg))),
            ctx.job_dir, services,
        )
        if cfg.tracking.get("records_table", True):
            tracking.log_records_table(read_records(ctx.job_dir / RECORDS_FILE))  # the full records, streamed
        ended = read_outcome(ctx.job_dir, stop, len(instances), len(records))
        planned = budget_metrics(ctx.job_dir, records, len(instances))  # over this run's instances
        records = job_dir_records(ctx.job_dir, records, [i.id for i in dataset.instances], keep=metric_view)
        metrics = {**summarize(records, k=cfg.k, seed=cfg.seed, **cfg.stats), **services.stats(),
                   **dataset_metrics(dataset), "n_infra_failures": float(ended.n_infra), **planned}
        summary = write_summary(cfg, ctx, resolved, metrics, run_id, stop)
        tracking.log_metrics(metrics)
        tracking.set_tags({"stop_reason": stop})
        tracking.set_tags({f"cts.prompt.{n}": v for n, v in services.prompt_versions().items()})
        tracking.log_artifacts([ctx.job_dir / RECORDS_FILE, ctx.job_dir / TRACES_FILE, summary,
                                ctx.job_dir / "config.yaml"])
        tracking.log_artifacts(services.prompt_files(), artifact_path="prompts")
        print_metrics(ctx.run_name, metrics)
        if note := stop_note(stop, metrics):
            print(note, flush=True)
        finish(ended, records, ctx.job_dir, resume_command(task_overrides(), ctx.job_dir),
               multirun=in_multirun())  # an incomplete job's run ends FAILED
    return metrics["score_mean"]


def count_done(job_dir: Path, instances: Sequence[Any]) -> int:
    """How many of ``instances`` have a finished record in the job dir."""
    ids = {i.id for i in instances}
    return len({r.id for r in read_records(job_dir / RECORDS_FILE)} & ids)


def job_dir_records(
    job_dir: Path, records: Sequence[Record], dataset_ids: Sequence[str], keep: Callable[[Record], Record] = lambda r: r
) -> list[Record]:
    """Every finished record of the job dir, in dataset order: what the job's metrics cover.

    A job dir is one result. A rerun with a smaller ``limit`` keeps the records an
    earlier, larger run finished, so the MLflow metrics, ``summary.json`` and the report
    (which reads ``records.jsonl``) all count the same instances.

    Args:
        keep: What to hold of each extra record (e.g. :func:`cts.metrics.metric_view`).
    """
    have = {r.id for r in records}
    extra = {r.id: keep(r) for r in read_records(job_dir / RECORDS_FILE) if r.id not in have}
    if not extra:
        return list(records)
    log.info("%s holds %d finished instances beyond this run's limit; metrics cover all %d",
             job_dir, len(extra), len(records) + len(extra))
    rank = {i: n for n, i in enumerate(dataset_ids)}
    return sorted([*records, *extra.values()], key=lambda r: rank.get(r.id, len(rank)))


def instance_tracer(cfg: DictConfig, tags: Mapping[str, str]) -> Any:
    """The per-instance MLflow trace hook (``tracking.instance_traces``; off by default, see the README), or None."""
    if not cfg.tracking.get("instance_traces", False):
        return None
    keep = {k: v for k, v in tags.items() if k in ("cts.system", "cts.sweep_dir")}
    return lambda inst, gold, record, traces: tracking.log_instance_trace(inst, gold, record, traces, keep)
