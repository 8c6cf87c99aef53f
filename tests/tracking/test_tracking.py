"""cts.tracking: runs always end, NaN stays visible, artifacts live beside the store, optional tracing."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from cts import tracking


def runs(uri: str):
    return tracking.search_runs(uri)


def test_a_failing_job_still_ends_its_run(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/m.db"
    tracking.prepare_store(uri)
    with pytest.raises(RuntimeError), tracking.open_mlflow_run(tracking.Experiment(uri, "exp"), "boom", {"k": "1"}):
        raise RuntimeError("job failed")
    with tracking.open_mlflow_run(tracking.Experiment(uri, "exp"), "ok", {"k": "2"}, tags={"cts.kind": "job"}):
        tracking.log_metrics({"score_mean": 50.0, "ua_unknown_rate": float("nan"), "bad": float("inf")})
    df = runs(uri).set_index("tags.mlflow.runName")
    assert df.loc["boom", "status"] == "FAILED" and df.loc["ok", "status"] == "FINISHED"
    assert df.loc["ok", "metrics.score_mean"] == 50.0 and math.isnan(df.loc["ok", "metrics.ua_unknown_rate"])
    assert "metrics.bad" not in df or math.isnan(df.loc["ok", "metrics.bad"])


def test_artifacts_go_beside_a_sqlite_store_not_the_working_dir(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"
    uri = f"sqlite:///{store}/m.db"
    tracking.prepare_store(uri)
    f = tmp_path / "records.jsonl"
    f.write_text("{}\n")
    with tracking.open_mlflow_run(tracking.Experiment(uri, "exp"), "a", {}):
        tracking.log_artifacts([f])
    assert list((store / "artifacts").rglob("records.jsonl")) and not (tmp_path / "mlruns").exists()


def test_flatten_nested_config() -> None:
    assert tracking.flatten({"a": {"b": 1, "c": {"d": None}}, "k": 3}) == {"a.b": "1", "a.c.d": "None", "k": "3"}


def test_llm_calls_become_trace_spans(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/m.db"
    listeners = []
    tracking.trace_llm_calls(SimpleNamespace(add_listener=listeners.append))
    event = SimpleNamespace(
        role="clarifier",
        spec_name="gpt",
        model="openai/gpt-5.2",
        messages=({"role": "user", "content": "q"},),
        params={"temperature": 0},
        prompt_version="abc",
        text='["Which year?"]',
        tokens_in=10,
        tokens_out=5,
        cost_usd=0.001,
        cached=False,
        latency_s=0.2,
        error=None,
    )
    with tracking.open_mlflow_run(tracking.Experiment(uri, "exp"), "traced", {}):
        listeners[0](event)
    traces = tracking.search_traces(uri, "exp")
    assert len(traces) == 1


def test_every_run_logs_the_resolved_versions_of_the_key_packages(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/m.db"
    tracking.prepare_store(uri)
    with tracking.open_mlflow_run(tracking.Experiment(uri, "exp"), "versions", {"k": "1"}):
        pass
    row = runs(uri).iloc[0]
    for pkg in ("hydra-core", "omegaconf", "litellm", "openai", "mlflow", "pandas", "scipy", "bm25s", "trafilatura"):
        assert row[f"params.version.{pkg}"] not in ("", "missing", None)
    assert list(tmp_path.rglob("versions.json"))


def test_the_html_cleaner_that_trafilatura_needs_is_installed() -> None:
    import lxml.html.clean  # noqa: F401 - split out of lxml; the visit path fails without it


def test_mlflow_telemetry_is_off_once_cts_tracking_is_imported() -> None:
    """MLflow 3 reports usage to its servers by default; cts turns that off (contacts no unasked host)."""
    import os
    import subprocess
    import sys

    code = (
        "import cts.tracking, mlflow; from mlflow.telemetry.utils import is_telemetry_disabled; "
        "from mlflow.environment_variables import MLFLOW_DISABLE_TELEMETRY as V; "
        "print(V.get(), is_telemetry_disabled())"
    )
    unset = ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK", "PYTEST_CURRENT_TEST", "CI")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


def test_a_new_experiment_gets_its_kind_once_and_a_kind_chosen_later_stays(tmp_path: Path) -> None:
    import mlflow

    uri = f"sqlite:///{tmp_path}/m.db"
    with tracking.open_mlflow_run(tracking.Experiment(uri, "exp", "genai_development"), "a", {}):
        pass
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("exp")
    assert exp.tags["mlflow.experimentKind"] == "genai_development"
    client.set_experiment_tag(exp.experiment_id, "mlflow.experimentKind", "custom_model_development")  # in the UI
    with tracking.open_mlflow_run(tracking.Experiment(uri, "exp", "genai_development"), "b", {}):
        pass
    assert client.get_experiment(exp.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"


def test_the_tracking_config_reaches_the_tasks() -> None:
    from cts.compose.job_config import tracking_settings

    settings = tracking_settings(
        {"uri": "sqlite:///x.db", "experiment": "e", "instance_traces": False, "experiment_kind": "genai_development"}
    )
    assert (settings.instance_traces, settings.records_table, settings.evaluation_dataset) == (False, True, True)
    assert settings.experiment_kind == "genai_development"


def test_jobs_racing_to_set_the_experiment_kind_on_one_server_do_not_fail(tmp_path, monkeypatch) -> None:
    """A Slurm array's jobs open one experiment at once: the losers' duplicate-tag error is not fatal."""
    import mlflow

    from cts import tracking

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    real = mlflow.set_experiment_tag

    def racing(key, value):  # another job set it between our read and our write
        real(key, value)
        raise mlflow.exceptions.MlflowException('duplicate key value violates unique constraint "experiment_tag_pk"')

    monkeypatch.setattr(mlflow, "set_experiment_tag", racing)
    tracking._ensure_experiment(uri, "race", "genai_development")  # no exception
    assert mlflow.get_experiment_by_name("race").tags["mlflow.experimentKind"] == "genai_development"


def test_the_records_table_has_one_row_per_repeat_and_keeps_its_columns(tmp_path: Path) -> None:
    import mlflow

    from cts.core.records import ArmResult, Record

    def rec(i: str, repeat: int, score: float) -> Record:
        return Record(id=i, k=1, clarified=ArmResult("q", score=score), orig=ArmResult("q", score=1.0), repeat=repeat)

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    finished = [rec("a", 1, 30.0), rec("b", 0, 20.0), rec("a", 0, 10.0), rec("b", 1, 40.0)]  # as they finished
    with tracking.open_mlflow_run(tracking.Experiment(uri, "tables"), "repeats", {}) as repeats:
        tracking.log_records_table(finished, ["b", "a"])
    with tracking.open_mlflow_run(tracking.Experiment(uri, "tables"), "once", {}) as once:
        tracking.log_records_table([rec("a", 0, 10.0), rec("b", 0, 20.0)], ["b", "a"])
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("tables")
    table = mlflow.load_table("records_table.json", run_ids=[repeats])
    rows = table[["instance_id", "repeat", "score"]].values.tolist()
    assert rows == [["b", 0, 20.0], ["b", 1, 40.0], ["a", 0, 10.0], ["a", 1, 30.0]]  # dataset order, then repeat
    old = ["instance_id", "run_id", "trace_id", "k", "mode", "questions", "answers", "n_unknown", "rewritten_query"]
    assert list(table.columns)[: len(old)] == old and list(table.columns)[-1] == "repeat"  # new column last
    deltas = mlflow.load_table("records_table.json", run_ids=[once]).pivot(
        index="instance_id", columns="run_id", values="delta"
    )  # the README's reader, on a job without repeats
    assert deltas[once].to_dict() == {"a": 9.0, "b": 19.0}


def test_a_jobs_end_writes_its_metrics_and_tags_in_one_batch_and_its_table_as_mlflow_does(
    tmp_path: Path, monkeypatch
) -> None:
    import contextvars
    import json

    import mlflow

    from cts.core.records import ArmResult, Record

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rows = [Record(id=i, k=1, clarified=ArmResult("q", score=50.0), orig=ArmResult("q", score=1.0)) for i in "ab"]
    with tracking.open_mlflow_run(tracking.Experiment(uri, "batched"), "job", {}) as run_id:
        writes: list[tuple[int, int]] = []
        real = mlflow.MlflowClient.log_batch

        def counted(self, run_id, metrics=(), params=(), tags=(), **kw):
            writes.append((len(metrics), len(tags)))
            return real(self, run_id, metrics=metrics, params=params, tags=tags, **kw)

        monkeypatch.setattr(mlflow.MlflowClient, "log_batch", counted)
        with tracking.deferred_run_data():
            tracking.log_records_table(rows, ["a", "b"])
            tracking.log_metrics({"score_mean": 1.0, "late": 2.0})
            tracking.set_tags({"stop_reason": "first", **{f"t{i}": str(i) for i in range(150)}})
            tracking.log_metrics({"score_mean": 3.0, "ua_unknown_rate": float("nan")})  # the last value wins
            tracking.set_tags({"stop_reason": "done"})
            assert writes == []  # nothing reaches the store before the block ends
        assert writes == [(3, 100), (0, 52)]  # 152 tags: MLflow takes 100 a batch
        with pytest.raises(RuntimeError), tracking.deferred_run_data():
            tracking.log_metrics({"never": 1.0})
            raise RuntimeError("the job's end failed")
        with tracking.deferred_run_data():
            copied = contextvars.copy_context()  # as a task or thread started inside the block would
        copied.run(tracking.set_tags, {"late": "after the block"})  # not held back in a batch already written
        tracking.log_records_table(rows[:1], ["a", "b"])  # a resumed job rewrites its table (no batch here)
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.data.metrics["score_mean"] == 3.0 and run.data.metrics["late"] == 2.0
    assert math.isnan(run.data.metrics["ua_unknown_rate"]) and "never" not in run.data.metrics
    assert run.data.tags["stop_reason"] == "done" and run.data.tags["t149"] == "149"
    assert run.data.tags["late"] == "after the block"
    assert json.loads(run.data.tags["mlflow.loggedArtifacts"]) == [{"path": "records_table.json", "type": "table"}]
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("batched")
    table = mlflow.load_table("records_table.json", run_ids=[run_id])  # replaced, not appended to
    assert table["instance_id"].tolist() == ["a"] and table["score"].tolist() == [50.0]
