"""Reading the store: runs, job runs (one per job dir), traces, artifacts, experiment ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cts.tracking._store import mlflow_module, prepare_store


def search_runs(uri: str, experiment: str | None = None) -> Any:
    """Runs as a pandas DataFrame (``params.*``, ``metrics.*``, ``tags.*`` columns).

    Args:
        uri: Tracking URI.
        experiment: An experiment name, or None for all experiments.
    """
    mlflow = mlflow_module()
    prepare_store(uri)
    mlflow.set_tracking_uri(uri)
    if experiment is None:
        return mlflow.search_runs(search_all_experiments=True)
    return mlflow.search_runs(experiment_names=[experiment])


def job_runs(uri: str, experiment: str | None = None, status: str | None = None) -> Any:
    """The job runs (tag ``cts.kind=job``) as a DataFrame, one per job dir, with an ``experiment`` column.

    A job dir is one result: of several runs recorded for it (cts before runs were
    continued on resume started one per rerun), the one that ended last is kept.

    Args:
        uri: Tracking URI.
        experiment: An experiment name, or None for all experiments.
        status: Keep only runs with this status (e.g. ``FINISHED``) before choosing.
    """
    runs = search_runs(uri, experiment)
    if runs.empty or "tags.cts.kind" not in runs:
        return runs.iloc[0:0].assign(experiment=[])
    runs = runs[runs["tags.cts.kind"] == "job"]
    if status is not None:
        runs = runs[runs["status"] == status]
    runs = one_run_per_job_dir(runs)
    names = {e.experiment_id: e.name for e in mlflow_module().search_experiments()}
    return runs.assign(experiment=runs["experiment_id"].map(names))


def one_run_per_job_dir(runs: Any) -> Any:
    """Keep, per ``tags.cts.job_dir``, the run that ended last (runs without the tag are all kept)."""
    if runs.empty or "tags.cts.job_dir" not in runs:
        return runs
    import pandas as pd

    runs = runs.sort_values(["end_time", "start_time"], na_position="last")
    has_dir = runs["tags.cts.job_dir"].fillna("") != ""
    kept = pd.concat([runs[has_dir].drop_duplicates("tags.cts.job_dir", keep="last"), runs[~has_dir]])
    return kept.sort_values("start_time")


def search_traces(uri: str, experiment: str) -> Any:
    """The MLflow traces (e.g. LLM-call spans) of one experiment, as a DataFrame."""
    mlflow = mlflow_module()
    prepare_store(uri)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment)
    return mlflow.search_traces(locations=[exp.experiment_id]) if exp else None


def download_artifact(uri: str, run_id: str, artifact_path: str, dst: Path) -> Path:
    """Download one artifact of a run into ``dst`` and return its local path."""
    mlflow = mlflow_module()
    prepare_store(uri)
    mlflow.set_tracking_uri(uri)
    dst.mkdir(parents=True, exist_ok=True)
    local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=artifact_path, dst_path=str(dst))
    return Path(local)


def experiment_id(uri: str, name: str) -> str | None:
    """The id of experiment ``name`` in the store at ``uri`` (None when it does not exist)."""
    exp = mlflow_module().MlflowClient(tracking_uri=uri).get_experiment_by_name(name)
    return str(exp.experiment_id) if exp else None
