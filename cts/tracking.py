"""The only module that touches MLflow.

One Hydra job = one MLflow run (params = the flattened resolved config, metrics =
pure functions over records, artifacts = records, summary, config, prompts).
A sweep report is logged as one more run tagged ``cts.kind=sweep_report``.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

_PARAM_VALUE_MAX = 6000  # MLflow's limit on a param value


def _mlflow() -> Any:
    import mlflow  # imported lazily: it costs ~1 s and most helpers here need it only in jobs

    return mlflow


def prepare_store(uri: str) -> None:
    """Create the tracking store's schema once (before parallel jobs start).

    A fresh SQLite store migrated concurrently by several processes gets
    corrupted, so the multirun callback calls this in the parent process.
    """
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    _mlflow().MlflowClient(tracking_uri=uri).search_experiments(max_results=1)


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten a nested mapping into ``a.b.c -> str(value)`` params."""
    out: dict[str, str] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = str(value)[:_PARAM_VALUE_MAX]
    return out


@contextlib.contextmanager
def job_run(
    uri: str,
    experiment: str,
    run_name: str,
    params: Mapping[str, str],
    tags: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """Start an MLflow run for one job and always end it.

    Yields:
        The run id. The run ends ``FAILED`` when the body raises, else ``FINISHED``.
    """
    mlflow = _mlflow()
    mlflow.set_tracking_uri(uri)
    _ensure_experiment(uri, experiment)
    run = mlflow.start_run(run_name=run_name, tags=dict(tags or {}))
    status = "FAILED"
    try:
        mlflow.log_params(dict(params))
        yield run.info.run_id
        status = "FINISHED"
    finally:
        mlflow.flush_trace_async_logging()  # LLM-call spans (services.llm.tracing) reach the store
        mlflow.end_run(status=status)


def _ensure_experiment(uri: str, name: str) -> None:
    """Select the experiment, creating it with artifacts beside a SQLite store.

    MLflow's default artifact root is ``./mlruns`` relative to the working
    directory, which scatters artifacts wherever a job happens to start.
    """
    mlflow = _mlflow()
    if mlflow.get_experiment_by_name(name) is None and uri.startswith("sqlite:///"):
        root = Path(uri.removeprefix("sqlite:///")).resolve().parent / "artifacts"
        try:
            mlflow.create_experiment(name, artifact_location=root.as_uri())
        except Exception:  # noqa: BLE001 - a parallel job created it first
            pass
    mlflow.set_experiment(name)


def log_metrics(metrics: Mapping[str, float]) -> None:
    """Log numeric metrics to the active run.

    NaN is logged as NaN (an undefined rate, e.g. the orig arm's UA unknown rate,
    stays visibly undefined instead of silently missing); None and inf are skipped.
    """
    clean = {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and not math.isinf(v)
    }
    if clean:
        _mlflow().log_metrics(clean)


def log_artifacts(paths: list[Path], artifact_path: str | None = None) -> None:
    """Log files (and directories) as artifacts of the active run."""
    mlflow = _mlflow()
    for p in paths:
        if p.is_dir():
            mlflow.log_artifacts(str(p), artifact_path=artifact_path)
        elif p.exists():
            mlflow.log_artifact(str(p), artifact_path=artifact_path)


def set_tags(tags: Mapping[str, str]) -> None:
    """Set tags on the active run."""
    _mlflow().set_tags(dict(tags))


def search_runs(uri: str, experiment: str | None = None) -> Any:
    """Runs as a pandas DataFrame (``params.*``, ``metrics.*``, ``tags.*`` columns).

    Args:
        uri: Tracking URI.
        experiment: An experiment name, or None for all experiments.
    """
    mlflow = _mlflow()
    mlflow.set_tracking_uri(uri)
    if experiment is None:
        return mlflow.search_runs(search_all_experiments=True)
    return mlflow.search_runs(experiment_names=[experiment])


def search_traces(uri: str, experiment: str) -> Any:
    """The MLflow traces (e.g. LLM-call spans) of one experiment, as a DataFrame."""
    mlflow = _mlflow()
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment)
    return mlflow.search_traces(locations=[exp.experiment_id]) if exp else None


def download_artifact(uri: str, run_id: str, artifact_path: str, dst: Path) -> Path:
    """Download one artifact of a run into ``dst`` and return its local path."""
    mlflow = _mlflow()
    mlflow.set_tracking_uri(uri)
    dst.mkdir(parents=True, exist_ok=True)
    local = mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path=artifact_path, dst_path=str(dst)
    )
    return Path(local)


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
    with job_run(uri, experiment, run_name, params={}, tags=all_tags) as run_id:
        log_metrics(metrics)
        log_artifacts(artifacts)
    return run_id


def trace_llm_calls(runtime: Any) -> None:
    """Record every LLM call of ``runtime`` as an MLflow trace span (``services.llm.tracing``).

    Spans carry the role, model, prompt version, messages, reply, tokens, cost and
    whether the response cache served it; they attach to the active run's experiment.
    """
    mlflow = _mlflow()

    def on_call(event: Any) -> None:
        end = time.time_ns()
        span = mlflow.start_span_no_context(
            name=f"{event.role}:{event.spec_name}",
            span_type="LLM",
            inputs={"messages": list(event.messages), "params": dict(event.params)},
            attributes={"role": event.role, "model": event.model, "prompt_version": event.prompt_version,
                        "tokens_in": event.tokens_in, "tokens_out": event.tokens_out,
                        "cost_usd": event.cost_usd, "cached": event.cached},
            start_time_ns=end - int(event.latency_s * 1e9),
        )
        span.end(outputs={"text": event.text, "error": event.error}, end_time_ns=end,
                 status="ERROR" if event.error else "OK")

    runtime.add_listener(on_call)
