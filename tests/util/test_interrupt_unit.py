"""cts._util.interrupt and run continuation in-process: the fast half of test_interrupt.py."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
from pathlib import Path

import pandas as pd
import pytest

from cts import tracking
from cts._util.interrupt import interruptible_job, job_dir_lock, resume_command
from cts.core.errors import Interrupted, JobDirLocked


def test_resume_command_replaces_the_dir_and_quotes(tmp_path: Path) -> None:
    args = ["clarifier=gpt", "hydra.run.dir=/old", "dataset.path=a b.jsonl"]
    assert resume_command(args, tmp_path / "j", script="run.py") == shlex.join(
        [
            sys.executable,
            os.path.abspath("run.py"),
            "clarifier=gpt",
            "dataset.path=a b.jsonl",
            f"hydra.run.dir={tmp_path / 'j'}",
        ]
    )
    sweep = ["-m", "k=1,2", "hydra.sweep.dir=/old"]
    assert resume_command(sweep, tmp_path / "j", str(tmp_path), script="/x/my run.py") == shlex.join(
        [sys.executable, "/x/my run.py", "-m", "k=1,2", f"hydra.sweep.dir={tmp_path}"]
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_inside_the_event_loop_ends_with_one_line(tmp_path: Path, capsys, sig) -> None:
    cancelled = []

    async def job() -> None:
        try:
            os.kill(os.getpid(), sig)
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)  # the pipeline's finally runs: records are flushed and closed
            raise

    with pytest.raises(Interrupted) as e, interruptible_job(tmp_path, 5, lambda: 2):
        asyncio.run(job())
    assert e.value.exit_code == 128 + sig and cancelled == [True]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"cts: stopped by {sig.name}: 2/5 instances done in {tmp_path}; resume with: {shlex.quote(sys.executable)} "
    )
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def test_a_job_dir_runs_one_job_at_a_time(tmp_path: Path) -> None:
    from filelock import FileLock

    other = FileLock(tmp_path / ".cts.lock")  # another process's hold, as far as flock is concerned
    with other, pytest.raises(JobDirLocked, match="another process is running a job in"), job_dir_lock(tmp_path):
        pass
    with job_dir_lock(tmp_path):
        pass


def test_a_resumed_job_dir_continues_its_run(tmp_path: Path) -> None:
    uri, job_dir = f"sqlite:///{tmp_path}/m.db", tmp_path / "job"
    with (
        pytest.raises(KeyboardInterrupt),
        tracking.open_mlflow_run(tracking.Experiment(uri, "e"), "j", {"limit": "5"}, job_dir=job_dir) as first,
    ):
        raise KeyboardInterrupt
    assert tracking.search_runs(uri).set_index("run_id").loc[first, "status"] == "KILLED"
    with tracking.open_mlflow_run(
        tracking.Experiment(uri, "e"), "j", {"limit": "8", "new": "x"}, job_dir=job_dir
    ) as second:
        tracking.log_metrics({"n_instances": 8})
    runs = tracking.search_runs(uri)
    assert second == first and len(runs) == 1
    run = runs.iloc[0]
    assert run["status"] == "FINISHED" and run["metrics.n_instances"] == 8
    assert run["params.limit"] == "5" and run["tags.cts.resume.limit"] == "8" and run["params.new"] == "x"
    assert run["tags.cts.resumes"] == "1"


def test_a_run_deleted_from_the_store_starts_a_new_linked_run(tmp_path: Path) -> None:
    import mlflow

    uri, job_dir = f"sqlite:///{tmp_path}/m.db", tmp_path / "job"
    with tracking.open_mlflow_run(tracking.Experiment(uri, "e"), "j", {}, job_dir=job_dir) as first:
        pass
    mlflow.MlflowClient(tracking_uri=uri).delete_run(first)
    with tracking.open_mlflow_run(tracking.Experiment(uri, "e"), "j", {}, job_dir=job_dir) as second:
        pass
    run = tracking.search_runs(uri).set_index("run_id").loc[second]
    assert second != first and run["tags.cts.previous_run_id"] == first


def test_one_run_per_job_dir_keeps_the_last_to_end() -> None:
    runs = pd.DataFrame(
        {
            "run_id": ["a", "b", "c", "d"],
            "tags.cts.job_dir": ["/j", "/j", "/k", None],
            "start_time": pd.to_datetime([1, 2, 3, 4]),
            "end_time": pd.to_datetime([9, 5, 6, 7]),
        }
    )
    assert list(tracking.one_run_per_job_dir(runs)["run_id"]) == ["a", "c", "d"]


def test_a_job_dir_moved_to_another_experiment_starts_a_new_linked_run(tmp_path: Path) -> None:
    uri, job_dir = f"sqlite:///{tmp_path}/m.db", tmp_path / "job"
    with tracking.open_mlflow_run(tracking.Experiment(uri, "e1"), "j", {}, job_dir=job_dir) as first:
        pass
    with tracking.open_mlflow_run(tracking.Experiment(uri, "e2"), "j", {}, job_dir=job_dir) as second:
        pass
    run = tracking.search_runs(uri, "e2").set_index("run_id").loc[second]
    assert second != first and run["tags.cts.previous_run_id"] == first


def test_a_run_started_but_not_recorded_in_the_job_dir_is_continued(tmp_path: Path) -> None:
    """A SIGKILL between MLflow's new run and the job dir's record of it: the resume continues that run."""
    uri, job_dir = f"sqlite:///{tmp_path}/m.db", tmp_path / "job"
    tags = {"cts.job_dir": str(job_dir)}
    with tracking.open_mlflow_run(tracking.Experiment(uri, "e"), "j", {}, tags, job_dir=tmp_path / "other") as ended:
        pass  # a FINISHED run of another dir is never taken
    client = tracking.mlflow_module().MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("e").experiment_id
    finished = client.create_run(experiment, tags=tags).info.run_id
    client.set_terminated(finished)  # a FINISHED run of this dir is not taken either
    orphan = client.create_run(experiment, tags=tags).info.run_id  # left RUNNING, its id nowhere in the job dir
    with tracking.open_mlflow_run(tracking.Experiment(uri, "e"), "j", {"limit": "5"}, tags, job_dir=job_dir) as run:
        pass
    assert run == orphan and ended not in (run, finished)
    runs = tracking.search_runs(uri).set_index("run_id")
    assert len(runs) == 3 and runs.loc[orphan, "status"] == "FINISHED" and runs.loc[orphan, "params.limit"] == "5"
    with tracking.open_mlflow_run(tracking.Experiment(uri, "e"), "j", {}, tags, job_dir=job_dir) as again:
        pass
    assert again == orphan  # from now on through the job dir's record
