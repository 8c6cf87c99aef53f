"""The only package that touches MLflow.

One Hydra job = one MLflow run (params = the flattened resolved config, metrics =
pure functions over records, artifacts = records, summary, config, prompts; input = the
dataset, ``_datasets``), one trace per instance with its assessments (``_instance``: the hook,
``_tracedoc``: the trace as data, ``_assessments``; written by a process of their own, ``_writer`` and
``_tracewrite``), the records as a table (``_tables``), LLM-call spans (``_traces``);
store set-up in ``_store``, checked before any work in ``_checks``; what a dead server missed waits
in the job dir (``_outbox``) for ``python -m cts.tracking.fill``. A sweep report is logged as one
more run tagged ``cts.kind=sweep_report``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cts._util.naming import factors
from cts._util.secrets import scrub
from cts._util.versions import package_versions
from cts.tracking import _batch
from cts.tracking._assessments import Assessed, log_assessments, trace_ids_of_runs
from cts.tracking._batch import deferred_run_data
from cts.tracking._datasets import dataset_digest, dataset_rows, log_dataset_input
from cts.tracking._human import (
    REVIEW_ARMS_TAG,
    REVIEW_TAG,
    StoredAssessment,
    human_assessments,
    instance_traces,
    log_to_runs,
    queued_traces,
    tag_traces,
    untag_traces,
)
from cts.tracking._instance import InstanceTraces, log_instance_trace
from cts.tracking._outbox import call, check_store, register_run, store_down, unreachable
from cts.tracking._reads import (
    download_artifact,
    experiment_id,
    job_runs,
    one_run_per_job_dir,
    search_runs,
    search_traces,
)
from cts.tracking._requests import REQUEST_AUDIT_FILE, log_request_audit, request_tag
from cts.tracking._runlife import end_run, kept_run, refuse_unsent, unrecorded_run
from cts.tracking._store import (
    TrackingStoreError,
    broken_store_message,
    mlflow_module,
    prepare_store,
    store_failed,
    store_lock_path,
)
from cts.tracking._tables import RECORDS_TABLE, log_records_table
from cts.tracking._tracedoc import search_turns
from cts.tracking._traces import trace_llm_calls
from cts.tracking._writer import IN_PROCESS_DOCS, close_held_writers, flush_traces, start_trace_writer

log = logging.getLogger(__name__)

__all__ = [
    "IN_PROCESS_DOCS",
    "RECORDS_TABLE",
    "REVIEW_ARMS_TAG",
    "REVIEW_TAG",
    "StoredAssessment",
    "human_assessments",
    "instance_traces",
    "tag_traces",
    "untag_traces",
    "queued_traces",
    "REQUEST_AUDIT_FILE",
    "log_request_audit",
    "request_tag",
    "Assessed",
    "InstanceTraces",
    "TrackingStoreError",
    "broken_store_message",
    "check_store",
    "dataset_digest",
    "dataset_rows",
    "deferred_run_data",
    "download_artifact",
    "experiment_id",
    "flatten",
    "close_held_writers",
    "flush_traces",
    "open_mlflow_run",
    "job_runs",
    "log_artifacts",
    "log_assessments",
    "log_dataset_input",
    "log_instance_trace",
    "log_metrics",
    "log_records_table",
    "log_to_runs",
    "log_report_run",
    "AnalysisRun",
    "Experiment",
    "log_analysis_run",
    "one_run_per_job_dir",
    "override_tags",
    "prepare_store",
    "search_runs",
    "search_traces",
    "search_turns",
    "set_tags",
    "start_trace_writer",
    "store_failed",
    "store_lock_path",
    "trace_ids_of_runs",
    "trace_llm_calls",
]

_PARAM_VALUE_MAX = 6000  # MLflow's limit on a param value


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten a nested mapping into ``a.b.c -> str(value)`` params (secrets masked)."""
    out: dict[str, str] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = scrub(name, str(value))[:_PARAM_VALUE_MAX]  # keys come from the env, never logged
    return out


_TAG_VALUE_MAX = 5000  # the smallest limit on a tag value across MLflow versions
_TAG_KEY_UNSAFE = re.compile(r"[^/\w.\- :]")  # MLflow's tag-name characters (``@`` is not one)


def override_tags(overrides: Sequence[str], swept: Collection[str] | None) -> dict[str, str]:
    """Tags of a job's overrides: ``cts.overrides`` (JSON list) and ``cts.factor.<key>`` per swept factor.

    The report reads the overrides from ``summary.json``; the tags let a run be found by its
    factors (``tags.cts.factor.clarifier.mode = 'sequential'``). A list too long for one tag
    value keeps its first overrides and says so in ``cts.overrides_truncated``.
    """
    kept = list(overrides)
    while kept and len(json.dumps(kept, ensure_ascii=False)) > _TAG_VALUE_MAX:
        kept.pop()
    tags = {"cts.overrides": json.dumps(kept, ensure_ascii=False)}
    if len(kept) < len(overrides):
        tags["cts.overrides_truncated"] = str(len(overrides) - len(kept))
    tags.update(
        {f"cts.factor.{_TAG_KEY_UNSAFE.sub('_', k)}": v[:_TAG_VALUE_MAX] for k, v in factors(overrides, swept).items()}
    )
    return tags


RUN_FILE = "mlflow_run.json"
"""Written into a job dir: the id of the job's MLflow run, so a resume continues it."""


@dataclass(frozen=True)
class Experiment:
    """Where a run goes: the tracking store and the experiment in it.

    Attributes:
        uri: The MLflow tracking URI.
        name: The experiment's name (created when missing).
        kind: ``mlflow.experimentKind`` of a new experiment, which picks the views MLflow's UI opens it
            with (``genai_development``, ``custom_model_development``); None leaves it unset.
    """

    uri: str
    name: str
    kind: str | None = None


@contextlib.contextmanager
def open_mlflow_run(
    where: Experiment,
    run_name: str,
    params: Mapping[str, str],
    tags: Mapping[str, str] | None = None,
    job_dir: Path | None = None,
) -> Iterator[str]:
    """Start (or, for a resumed job dir, continue) the MLflow run of one job in ``where``, and always end it.

    Besides ``params``, the run logs the resolved versions of the key packages
    (params ``version.<package>`` and the artifact ``versions.json``).

    With ``job_dir``, the run id is stored there (:data:`RUN_FILE`) before the body
    runs, so a job resumed after any kill (SIGKILL included) continues the same run:
    its status, metrics and artifacts are updated; params are immutable in MLflow, so
    a changed one is kept as the tag ``cts.resume.<param>``. When the stored run is
    gone (another store or experiment, deleted), a new run starts tagged ``cts.previous_run_id``.
    A kill after the run started but before its id was stored left it ``RUNNING`` with the
    job dir's tag (``tags["cts.job_dir"]``): the resumed job continues that run.

    Yields:
        The run id. The run ends ``KILLED`` on KeyboardInterrupt (SIGINT, or SIGTERM
        via :mod:`cts._util.interrupt`), ``FAILED`` when the body raises anything else, else
        ``FINISHED``.
    """
    from cts.tracking.fill import fill_earlier  # here: python -m cts.tracking.fill imports this package first

    uri, experiment, experiment_kind = where.uri, where.name, where.kind
    mlflow = mlflow_module()
    mlflow.set_tracking_uri(uri)
    fill_earlier(uri, job_dir)  # a resume before python -m cts.tracking.fill: the earlier data first
    previous, resumed = _stored_run_id(job_dir, uri), False
    try:
        if (why := store_down(uri)) is not None:
            raise ConnectionError(why)
        prepare_store(uri)
        _ensure_experiment(uri, experiment, experiment_kind)
        if previous is None and job_dir is not None:
            previous = unrecorded_run(uri, experiment, dict(tags or {}))
        resumed = previous is not None and _run_exists(uri, previous, experiment)
        run = (
            mlflow.start_run(run_id=previous) if resumed else mlflow.start_run(run_name=run_name, tags=dict(tags or {}))
        )
    except Exception as e:
        if not unreachable(uri, e):
            raise
        run = kept_run(experiment, run_name, dict(tags or {}), experiment_kind, job_dir)  # the job goes on
    run_id = run.info.run_id
    register_run(run_id, job_dir)  # from now on, a store that stops answering leaves the run's writes in job_dir
    status = "FAILED"
    try:
        _store_run_id(job_dir, uri, run_id)
        versions = package_versions()
        all_params = {**dict(params), **{f"version.{k}": v for k, v in versions.items()}}
        # tags were set when the run started (same job dir)
        call(
            uri, run_id, {"op": "params", "params": all_params}, lambda: _log_params(run, all_params, previous, resumed)
        )
        call(uri, run_id, {"op": "versions", "versions": versions}, lambda: mlflow.log_dict(versions, "versions.json"))
        yield run_id
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        end_run(uri, run_id, status)
    refuse_unsent(uri, run_id, job_dir)


def _stored_run_id(job_dir: Path | None, uri: str) -> str | None:
    """The run id a job dir holds for this store, if any."""
    path = job_dir / RUN_FILE if job_dir else None
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None
    return str(data["run_id"]) if data.get("tracking_uri") == uri and data.get("run_id") else None


def _store_run_id(job_dir: Path | None, uri: str, run_id: str) -> None:
    if job_dir is not None:
        job_dir.mkdir(parents=True, exist_ok=True)
        tmp = job_dir / f".{RUN_FILE}.tmp"
        tmp.write_text(json.dumps({"tracking_uri": uri, "run_id": run_id}), encoding="utf-8")
        tmp.replace(job_dir / RUN_FILE)


def _run_exists(uri: str, run_id: str, experiment: str) -> bool:
    """Whether the run is still active in ``experiment`` (else a resume starts a new, linked run)."""
    mlflow = mlflow_module()
    try:
        run = mlflow.MlflowClient(tracking_uri=uri).get_run(run_id)
    except Exception:  # noqa: BLE001 - deleted or from another store: start a new run
        return False
    exp = mlflow.get_experiment_by_name(experiment)
    return run.info.lifecycle_stage == "active" and exp is not None and run.info.experiment_id == exp.experiment_id


def _log_params(run: Any, params: Mapping[str, str], previous: str | None, resumed: bool) -> None:
    """Log params; on a resumed run only new ones, and changed values as ``cts.resume.<param>`` tags."""
    mlflow = mlflow_module()
    if not resumed:
        mlflow.log_params(dict(params))
        if previous:
            mlflow.set_tag("cts.previous_run_id", previous)
        return
    old = run.data.params
    mlflow.log_params({k: v for k, v in params.items() if k not in old})
    changed = {f"cts.resume.{k}": v for k, v in params.items() if k in old and old[k] != v}
    n = int(run.data.tags.get("cts.resumes", "0")) + 1
    mlflow.set_tags({**changed, "cts.resumes": str(n)})


def _ensure_experiment(uri: str, name: str, kind: str | None = None) -> None:
    """Select the experiment, creating it with artifacts beside a SQLite store, and set its kind.

    MLflow's default artifact root is ``./mlruns`` relative to the working
    directory, which scatters artifacts wherever a job happens to start.
    """
    mlflow = mlflow_module()
    if mlflow.get_experiment_by_name(name) is None and uri.startswith("sqlite:///"):
        root = Path(uri.removeprefix("sqlite:///")).resolve().parent / "artifacts"
        try:
            mlflow.create_experiment(name, artifact_location=root.as_uri())
        except Exception:  # noqa: BLE001 - a parallel job created it first
            pass
    experiment = mlflow.set_experiment(name)
    if kind and _KIND_TAG not in experiment.tags:  # once: a kind chosen later in the UI stays
        try:
            mlflow.set_experiment_tag(_KIND_TAG, kind)
        except Exception as e:  # noqa: BLE001 - jobs starting together on one server: the first one set it
            if _KIND_TAG not in (mlflow.get_experiment(experiment.experiment_id).tags or {}):
                log.warning("the experiment's kind (%s) was not set: %s", _KIND_TAG, e)


_KIND_TAG = "mlflow.experimentKind"


def log_metrics(metrics: Mapping[str, float]) -> None:
    """Log numeric metrics to the active run (in one batch with the others inside :func:`deferred_run_data`).

    NaN is logged as NaN (an undefined rate, e.g. the orig arm's UA unknown rate,
    stays visibly undefined instead of silently missing); None and inf are skipped.
    """
    clean = {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and not math.isinf(v)
    }
    if clean:
        _batch.log_metrics(clean)


def log_artifacts(paths: list[Path], artifact_path: str | None = None) -> None:
    """Log files (and directories) as artifacts of the active run (kept in the job dir while the store is down)."""
    mlflow = mlflow_module()
    op = {"op": "artifacts", "paths": [str(p.resolve()) for p in paths], "artifact_path": artifact_path}
    call(mlflow.get_tracking_uri(), mlflow.active_run().info.run_id, op, lambda: _log_artifacts(paths, artifact_path))


def _log_artifacts(paths: list[Path], artifact_path: str | None = None) -> None:
    mlflow = mlflow_module()
    for p in paths:
        if p.is_dir():
            mlflow.log_artifacts(str(p), artifact_path=artifact_path)
        elif p.exists():
            mlflow.log_artifact(str(p), artifact_path=artifact_path)


def set_tags(tags: Mapping[str, str]) -> None:
    """Set tags on the active run (in one batch with the others inside :func:`deferred_run_data`)."""
    _batch.set_tags(tags)


def log_report_run(
    uri: str,
    experiment: str,
    run_name: str,
    metrics: Mapping[str, float],
    artifacts: list[Path],
    tags: Mapping[str, str] | None = None,
) -> str:
    """Log a sweep-level report as its own run; returns the run id."""
    all_tags = {"cts.kind": "sweep_report", **(tags or {})}
    with open_mlflow_run(Experiment(uri, experiment), run_name, params={}, tags=all_tags) as run_id:
        log_metrics(metrics)
        log_artifacts(artifacts)
    return run_id


@dataclass(frozen=True)
class AnalysisRun:
    """A stand-alone analysis (e.g. ``python -m cts.realism``) as one run: what it logs."""

    experiment: str
    name: str
    params: Mapping[str, str]
    metrics: Mapping[str, float]
    artifacts: list[Path]
    tags: Mapping[str, str] = field(default_factory=dict)


def log_analysis_run(uri: str, analysis: AnalysisRun) -> str:
    """Log ``analysis`` as its own run in the store at ``uri``; returns the run id."""
    tags = dict(analysis.tags)
    where = Experiment(uri, analysis.experiment)
    with open_mlflow_run(where, analysis.name, params=analysis.params, tags=tags) as run_id:
        log_metrics(analysis.metrics)
        log_artifacts(analysis.artifacts)
    return run_id
