"""Task ``evaluate``: the clarify-then-search protocol (clarified + orig arms) over a dataset."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cts import tracking
from cts._util.interrupt import interruptible_job
from cts._util.io import atomic_write_text
from cts.core.errors import ConfigError
from cts.core.records import Record, read_records
from cts.core.stages import component_roles, stages
from cts.data.clusters import ci_summary, dataset_clusters
from cts.data.jsonl import Dataset, dataset_metrics, select_instances
from cts.llm import audit_scope, usage_scope
from cts.protocol.design import PLAIN, Design
from cts.protocol.fidelity import ua_fidelity
from cts.protocol.job_files import RECORDS_FILE, TRACES_FILE, DirRecords, trace_lines
from cts.protocol.metrics import metric_view, summarize
from cts.protocol.outcome import finish, read_outcome
from cts.protocol.pipeline import Roles, run_instances
from cts.protocol.settings import InstanceSettings, JobSettings
from cts.protocol.spend import (
    run_within_spend_limit,
    spend_metrics,
    stop_note,
    within_spend_limit,
)
from cts.protocol.unscored import infra_by_role, rejected_by_role, unscored_line, unscored_rates
from cts.stats.bootstrap import DEFAULT_RESAMPLING, Resampling
from cts.sweep import orig_share_for, sweep_progress
from cts.tasks.job import (
    Execution,
    RunInfo,
    check_resume,
    print_metrics,
    prompt_files,
    prompt_versions,
    write_config,
    write_summary,
)
from cts.tasks.registry import OutputsUnwritable, TaskContext, task

log = logging.getLogger(__name__)

ROLE_NAMES: tuple[str, ...] = component_roles()
"""The roles of a job when this module loads (:func:`cts.core.stages.component_roles`); each is the
config key of its component (``clarifier=...``)."""


@dataclass(frozen=True)
class EvalProtocol:
    """What a job measures: the budget ``k`` and how scores are summarised (``seed``, ``bootstrap``)."""

    k: int
    seed: int = 0
    bootstrap: Mapping[str, Any] = field(default_factory=dict)
    """The bootstrap settings of the intervals (``n_resamples``, ``confidence``)."""
    design: Design = PLAIN
    """Repeats and attribution arms (``repeats``, ``repeat_temperature``, ``repeat_stages``, ``arms``)."""
    ua_audit: bool = False
    """Add the fidelity audit of the UA's answers (:mod:`cts.protocol.fidelity`; a ``ua/persona`` job)."""

    @property
    def resampling(self) -> Resampling:
        """The intervals' resampling: ``bootstrap`` and ``seed`` (the schema's defaults for a key not set)."""
        n, confidence = self.bootstrap.get("n_resamples"), self.bootstrap.get("confidence")
        default = DEFAULT_RESAMPLING
        return Resampling(
            default.n_resamples if n is None else int(n),
            default.confidence if confidence is None else float(confidence),
            int(self.seed),
        )


@dataclass(frozen=True)
class Resume:
    """How a job resumes: the protocol fingerprint its dir must match, and the rerun command.

    Attributes:
        fingerprint: Hash of the protocol config (:func:`cts.compose.job_config.protocol_fingerprint`).
        config: The protocol config (stored beside it, so a refusal names the keys that differ).
        command: The command that resumes the job (printed when it ends incomplete).
        multirun: Whether the job runs inside a Hydra multirun.
    """

    fingerprint: str
    config: Mapping[str, Any]
    command: str
    multirun: bool


def check_job(job_dir: Path, resume: Resume) -> None:
    """Refuse a job dir of another protocol (before anything is built).

    ``k`` is checked once, with the other values, before the job starts: its bound is the
    schema's (:mod:`cts.compose.schema`, :func:`cts.compose.validate.value_problems`).
    """
    check_resume(job_dir, resume.fingerprint, resume.config)


def warn_small_batches(concurrency: int, batch: Mapping[str, Any]) -> None:
    """Say so when batched roles would wait in many small batches (``concurrency`` bounds a stage's batch)."""
    roles, most = list(batch.get("roles") or []), int(batch.get("max_requests") or 0)
    if roles and concurrency < most:
        log.warning(
            "batch mode: concurrency=%d instances in flight per job puts at most that many requests of a stage "
            "in one batch, and each batch waits its turnaround; concurrency=%d sends up to a whole batch at once",
            concurrency,
            most,
        )


def compose_evaluate(ctx: TaskContext) -> float | None:
    """Check the job dir, build the dataset and roles, run the protocol (the composer of :func:`evaluate_task`)."""
    from cts._util.interrupt import resume_command
    from cts._util.io import output_fault, unwritable

    job_dir = ctx.run.context.job_dir
    where = ctx.run.context
    resume = Resume(ctx.fingerprint, ctx.protocol_config, resume_command(list(where.command), job_dir), where.multirun)
    check_job(job_dir, resume)
    design = design_of(ctx)  # a bad design stops the job before anything is built
    dataset, roles = ctx.input(), build_roles(ctx)
    warn_small_batches(ctx.value("concurrency"), ctx.value("services.llm.batch", default=None) or {})
    if ctx.value("services.llm.tracing", default=None):
        tracking.trace_llm_calls(ctx.llm)
    try:
        ua_audit = ctx.value("ua", "persona", default=None) is not None
        return evaluate_task(
            dataset=dataset,
            roles=roles,
            protocol=EvalProtocol(ctx.value("k"), ctx.value("seed"), ctx.value("bootstrap"), design, ua_audit),
            run=ctx.run,
            resume=resume,
            execution=Execution(
                ctx.spend_limit,
                ctx.value("concurrency"),
                ctx.value("limit"),
                role_models(ctx),
                orig_parts(ctx),
                ctx.resource_counters,
            ),
        )
    except OSError as e:
        fault = output_fault(e)
        if fault is None:
            raise
        named = fault if fault.filename is not None else unwritable(fault, job_dir)  # e.g. a flush: the job dir
        instances = select_instances(dataset, ctx.value("limit"))
        raise OutputsUnwritable(named, job_dir, instances, resume.command, resume.multirun) from e


def design_of(ctx: TaskContext) -> Design:
    """The job's :class:`~cts.protocol.design.Design` (``repeats``, ``repeat_temperature``, ``repeat_stages``, ``arms``)."""
    try:
        return Design.of(
            ctx.value("repeats", default=1),
            ctx.value("repeat_temperature", default=None),
            ctx.value("repeat_stages", default=None),
            ctx.value("arms", default=None),
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(f"cts: {e}") from None


def build_roles(ctx: TaskContext) -> Roles:
    """Build the component of every declared stage and of the question typer (one config key each)."""
    paper = {f.name for f in fields(Roles)}
    built = {name: ctx.build(name) for name in component_roles()}
    return Roles(
        **{k: v for k, v in built.items() if k in paper}, extra={k: v for k, v in built.items() if k not in paper}
    )


def role_models(ctx: TaskContext) -> dict[str, str]:
    """Per role: the model id it calls (``<role>.model.id``), or the baseline's class."""
    return {
        name: str(ctx.value(name, "model", "id", default=None) or ctx.value(name, "_target_").rsplit(".", 1)[-1])
        for name in component_roles()
    }


def orig_parts(ctx: TaskContext) -> dict[str, Any]:
    """What the orig arm of an instance depends on: dataset (and gold), search, judge, routing."""
    llm = ctx.value("services.llm", default=None) or {}
    routing = {key: llm.get(key) for key in ("api_base", "served_name", "max_reasks")}
    return {
        **ctx.values("dataset", *(s.role for s in stages() if s.on_arm)),  # search, judge
        "llm": routing,
        "corpus_lang": ctx.value("services.corpus_lang", default=None),
    }


@task(compose_evaluate, calls=component_roles)
def evaluate_task(
    *,
    dataset: Dataset,
    roles: Roles,
    protocol: EvalProtocol,
    run: RunInfo,
    resume: Resume,
    execution: Execution,
) -> float | None:
    """Run the protocol (clarified + orig arms) over the dataset and track the job.

    Args:
        dataset: The instances and their static gold.
        roles: The built clarifier, UA, rewriter, search backend, judge and question typer.
        protocol: The budget ``k``, the design, and the summary settings.
        run: Where the job sits and how it is tracked.
        resume: The job dir's fingerprint and the resume command (see :func:`check_job`).
        execution: The spend limit, instances in flight and evaluated (``limit``), each role's model,
            what the orig arm depends on (a sweep's jobs share it), the resources' counters.

    Returns:
        The job's mean restore_score_100 (Hydra's sweep metric).
    """
    ctx, k, spend_limit = run.context, protocol.k, execution.spend_limit
    instances = select_instances(dataset, execution.limit)
    n_runs = len(instances) * protocol.design.repeats  # one record per (instance, repeat)
    tracer = instance_tracer(run)
    audits: list[Mapping[str, Any]] = []  # the request audit of the job's calls (cts.llm.audit_scope)

    async def job() -> Any:
        with audit_scope() as audit:
            audits.append(audit)
            return await run_instances(
                instances,
                dataset.gold,
                roles,
                InstanceSettings(k, protocol.design, orig_share_for(execution.orig_parts)),
                JobSettings(
                    ctx.job_dir,
                    execution.concurrency,
                    usage_scope,
                    execution.models,
                    progress=sweep_progress() or True,
                    keep=metric_view,
                    on_instance=tracer,
                ),
            )

    # In a sweep the instances start before the job's MLflow run is set up (their traces wait for it),
    # unless the store already failed another job.
    late = tracking.store_failed(run.tracking.uri)
    early = contextlib.nullcontext() if late else within_spend_limit(job, ctx.job_dir, spend_limit)
    with (
        interruptible_job(
            ctx.job_dir, n_runs, lambda: count_done(ctx.job_dir, instances, protocol.design.repeats), ctx.sweep_dir
        ),
        early as started,
        tracking.open_mlflow_run(
            tracking.Experiment(run.tracking.uri, run.tracking.experiment, run.tracking.experiment_kind),
            ctx.run_name,
            tracking.flatten(dict(run.config)),
            dict(run.tags),
            job_dir=ctx.job_dir,
        ) as run_id,
    ):
        write_config(run)  # now, while the instances run: not among the job's last steps
        if tracer is not None:
            tracer.attach(run_id, run.tracking.uri)  # the instances that finished while the run was set up
            backfill_traces(tracer, ctx.job_dir, dataset)  # and those an earlier invocation committed
        tracking.log_dataset_input(
            dataset.name, instances, dataset.gold, evaluation_dataset=run.tracking.evaluation_dataset
        )
        records, stop = started.result() if started else run_within_spend_limit(job, ctx.job_dir, spend_limit)
        ended = read_outcome(ctx.job_dir, stop, n_runs, len(records))
        on_disk = DirRecords(ctx.job_dir)  # streamed on each pass, never held
        planned = spend_metrics(ctx.job_dir, records, n_runs, on_disk)  # over this run's instances (and repeats)
        records = job_dir_records(on_disk, records, [i.id for i in dataset.instances], keep=metric_view)
        clusters = dataset_clusters(dataset)
        metrics = {
            **summarize(records, k=k, resampling=protocol.resampling, clusters=clusters),
            **execution.resource_counters(),
            **dataset_metrics(dataset),
            "n_infra_failures": float(ended.n_infra),
            **planned,
            **(ua_fidelity(records, {i.id: i.fused_query for i in dataset.instances}) if protocol.ua_audit else {}),
        }
        ci = ci_summary(getattr(dataset, "cluster_field", None), clusters, [r.id for r in records])
        missing = ended.n_total - ended.n_done
        unscored = unscored_rates(records, rejected_by_role(ended.failures, missing), infra_by_role(ended.failures))
        if tracer is not None:  # traces first: the end's writes then never wait for the writer's lock (SQLite)
            tracking.flush_traces(run.tracking.uri)
        with tracking.deferred_run_data():  # the end's metrics and tags: one store write
            if run.tracking.records_table:
                log_job_records_table(on_disk, [i.id for i in dataset.instances], run_id, tracer)
            log_job_outputs(run, k, metrics, run_id, stop, {**ci, "unscored": unscored})
            tracking.log_metrics(unscored)  # beside the job's metrics, outside summary.json's (pinned by the digests)
            log_request_audit(ctx.job_dir, audits)
        print_metrics(ctx.run_name, metrics)
        if line := unscored_line(unscored):
            print(line, flush=True)
        if note := stop_note(stop, metrics):
            print(note, flush=True)
        finish(ended, records, ctx.job_dir, resume.command, multirun=resume.multirun)  # incomplete: run FAILED
    return metrics["score_mean"]


def log_job_outputs(
    run: RunInfo, k: int, metrics: Mapping[str, float], run_id: str, stop: str, extra: Mapping[str, Any] | None = None
) -> None:
    """Write the summary (with ``extra`` entries) and log metrics, tags, records, traces, config and prompts."""
    job_dir = run.context.job_dir
    summary = write_summary(run, k, metrics, run_id, stop, extra)
    tracking.log_metrics(metrics)
    tracking.set_tags({"stop_reason": stop})
    tracking.set_tags({f"cts.prompt.{n}": v for n, v in prompt_versions().items()})
    tracking.log_artifacts([job_dir / RECORDS_FILE, job_dir / TRACES_FILE, summary, job_dir / "config.yaml"])
    tracking.log_artifacts(prompt_files(), artifact_path="prompts")


def log_request_audit(job_dir: Path, audits: Sequence[Mapping[str, Any]]) -> None:
    """Write the job's request audit (per role, what its requests carried) and log it with one tag per role."""
    audit = {role: entry.as_json() for found in audits for role, entry in found.items()}
    if not audit:
        return
    path = job_dir / tracking.REQUEST_AUDIT_FILE
    atomic_write_text(path, json.dumps(audit, indent=1, ensure_ascii=False, sort_keys=True, default=str) + "\n")
    tracking.log_request_audit(path, audit)


def count_done(job_dir: Path, instances: Sequence[Any], repeats: int = 1) -> int:
    """How many runs of ``instances`` (an instance per repeat below ``repeats``) have a finished record in the job dir."""
    ids = {i.id for i in instances}
    return len({(r.id, r.repeat) for r in read_records(job_dir / RECORDS_FILE) if r.id in ids and r.repeat < repeats})


def job_dir_records(
    on_disk: Iterable[Record],
    records: Sequence[Record],
    dataset_ids: Sequence[str],
    keep: Callable[[Record], Record] = lambda r: r,
) -> list[Record]:
    """Every finished record of the job dir (``on_disk``), in dataset order: what the job's metrics cover.

    A job dir is one result. A rerun with a smaller ``limit`` keeps the records an
    earlier, larger run finished, so the MLflow metrics, ``summary.json`` and the report
    (which reads ``records.jsonl``) all count the same instances.

    Args:
        keep: What to hold of each extra record (e.g. :func:`cts.protocol.metrics.metric_view`).
    """
    have = {(r.id, r.repeat) for r in records}
    extra = {(r.id, r.repeat): keep(r) for r in on_disk if (r.id, r.repeat) not in have}
    if not extra:
        return list(records)
    log.info(
        "the job dir holds %d finished instances beyond this run's limit; metrics cover all %d",
        len(extra),
        len(records) + len(extra),
    )
    rank = {i: n for n, i in enumerate(dataset_ids)}
    return sorted([*records, *extra.values()], key=lambda r: rank.get(r.id, len(rank)))


def instance_tracer(run: RunInfo) -> tracking.InstanceTraces | None:
    """The per-instance MLflow trace hook (``tracking.instance_traces``, on by default), or None."""
    if not run.tracking.instance_traces:
        return None
    tags = {k: v for k, v in run.tags.items() if k in ("cts.system", "cts.sweep_dir")}
    return tracking.InstanceTraces(tags, uri=run.tracking.uri)


def backfill_traces(tracer: tracking.InstanceTraces, job_dir: Path, dataset: Any) -> None:
    """Trace the job dir's records that have no trace yet (an earlier invocation stopped before writing them)."""
    by_id = {i.id: i for i in dataset.instances}
    missing = [r for r in tracer.missing(read_records(job_dir / RECORDS_FILE)) if r.id in by_id]
    if not missing:
        return
    lines = trace_lines(job_dir, {(r.id, r.repeat) for r in missing})
    tracer.backfill((by_id[r.id], dataset.gold[r.id], r, lines[r.id, r.repeat]) for r in missing)


def log_job_records_table(
    records: Iterable[Record], order: Sequence[str], run_id: str, tracer: tracking.InstanceTraces | None
) -> None:
    """Log every record of the job dir (``records``) as the run's table, in dataset order, with each instance's trace id.

    Instances an earlier invocation of a resumed job traced are found in the store.
    """
    trace_ids = dict(tracer.trace_ids) if tracer else {}
    if tracer and any(r.id not in trace_ids for r in records):
        earlier = tracking.trace_ids_of_runs([run_id])
        trace_ids = {**{i: t for (_, i), t in earlier.items()}, **trace_ids}
    tracking.log_records_table(records, order, trace_ids)
