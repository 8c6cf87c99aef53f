"""A tracking server that stops answering: each call is bounded, what the store missed waits in the job dir,
and ``python -m cts.tracking.fill`` writes it once the store is back."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cts import tracking
from cts.tracking import _outbox
from cts.tracking._checks import server_down
from cts.tracking.fill import fill_job, job_dirs
from tests.cluster_servers import free_port
from tests.prewarmed import run_script


@pytest.fixture(autouse=True)
def _fresh_outbox() -> Iterator[None]:
    _outbox.reset()
    yield
    _outbox.reset()


def dead_uri() -> str:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_every_mlflow_http_call_retries_a_bounded_number_of_times() -> None:
    """MLflow's own default (7 retries, backoff factor 2) held a dead server's call for about 4 minutes."""
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
    assert os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] == "1"
    assert int(os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]) <= 15  # a hung server: 3 x 15 s, then the probe


def test_a_call_to_a_dead_server_is_kept_in_the_job_dir_and_the_next_ones_at_once(tmp_path: Path) -> None:
    uri, calls = dead_uri(), []
    _outbox.register_run("r1", tmp_path)

    def fails() -> None:
        calls.append(1)
        raise ConnectionError("refused")

    assert _outbox.call(uri, "r1", {"op": "batch", "metrics": {"m": [1.0, 5]}, "tags": {}}, fails) is None
    assert _outbox.store_down(uri) is not None
    start = time.monotonic()
    _outbox.call(uri, "r1", {"op": "end", "status": "FINISHED", "end_time": 6}, fails)
    assert time.monotonic() - start < 0.1 and calls == [1]  # not tried again: the store is down
    kept = [json.loads(line) for line in (tmp_path / _outbox.OUTBOX_FILE).read_text().splitlines()]
    assert [k["op"] for k in kept] == ["batch", "end"] and {k["run_id"] for k in kept} == {"r1"}
    assert _outbox.unsent(tmp_path) == (2, 0)


def test_a_failure_of_a_server_that_answers_is_raised_not_kept(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()  # accepts: the probe times out instead of being refused
        uri = f"http://127.0.0.1:{s.getsockname()[1]}"
        _outbox.register_run("r1", tmp_path)
        with pytest.raises(ValueError):
            _outbox.call("sqlite:///x.db", "r1", {"op": "x"}, lambda: (_ for _ in ()).throw(ValueError("bad")))
    assert _outbox.store_down(uri) is None and not (tmp_path / _outbox.OUTBOX_FILE).exists()


def test_a_job_whose_server_dies_ends_with_one_line_and_fill_writes_the_rest(tmp_path: Path) -> None:
    """The calls of a run kept while the store was down are written by the fill, in order, with the run's end."""
    uri, run_id, job_dir, error = _job_whose_store_went_down(tmp_path)
    assert error.message.startswith(f"error: tracking: the MLflow store {uri} stopped answering (ConnectionRefused")
    assert f"python -m cts.tracking.fill {job_dir}" in error.message and "\n" not in error.message
    client = tracking.mlflow_module().MlflowClient(uri)
    assert client.get_run(run_id).info.status == "RUNNING" and "score_mean" not in client.get_run(run_id).data.metrics
    _outbox.reset()  # the store is back (a new process)
    assert job_dirs([tmp_path]) == [job_dir]
    assert fill_job(job_dir).endswith(f"run {run_id}: 3 calls and 0 traces written to {uri}")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.metrics == {"before": 1.0, "score_mean": 2.0, "大": 3.0}
    assert run.data.tags["cts.note"] == "澄清" and run.data.params["p"] == "1"
    assert [f.path for f in client.list_artifacts(run_id)] == ["summary.json", "versions.json"]
    assert not (job_dir / _outbox.OUTBOX_FILE).exists() and job_dirs([tmp_path]) == []


def test_a_job_that_starts_while_its_server_is_down_runs_and_fill_creates_its_run(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracking.prepare_store(uri)
    _outbox.mark_down(uri, "ConnectionRefusedError: gone")
    job_dir = tmp_path / "job"
    with pytest.raises(tracking.TrackingStoreError):
        with tracking.open_mlflow_run(
            tracking.Experiment(uri, "exp"), "job", {"p": "1"}, {"cts.kind": "job"}, job_dir=job_dir
        ) as kept:
            tracking.log_metrics({"score_mean": 4.0})
            (job_dir / "summary.json").write_text(json.dumps({"run_id": kept}), encoding="utf-8")
    assert tracking.mlflow_module().active_run() is None
    _outbox.reset()
    fill_job(job_dir)
    run_id = json.loads((job_dir / "mlflow_run.json").read_text())["run_id"]
    assert run_id != kept and json.loads((job_dir / "summary.json").read_text())["run_id"] == run_id
    run = tracking.mlflow_module().MlflowClient(uri).get_run(run_id)
    assert (run.info.status, run.info.run_name, run.data.metrics) == ("FINISHED", "job", {"score_mean": 4.0})
    assert run.data.tags["cts.kind"] == "job" and run.data.params["p"] == "1"
    assert fill_job(job_dir).endswith("0 calls and 0 traces written to " + uri)  # nothing twice


def test_a_job_resumed_before_the_fill_writes_the_earlier_data_first_and_continues_that_run(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracking.prepare_store(uri)
    _outbox.mark_down(uri, "ConnectionRefusedError: gone")
    job_dir = tmp_path / "job"
    with pytest.raises(tracking.TrackingStoreError):
        with tracking.open_mlflow_run(
            tracking.Experiment(uri, "exp"), "job", {"p": "1"}, {"cts.kind": "job"}, job_dir=job_dir
        ):
            tracking.log_metrics({"first": 1.0})
    _outbox.reset()  # the store is back; the job is resumed without the fill
    with tracking.open_mlflow_run(
        tracking.Experiment(uri, "exp"), "job", {"p": "1"}, {"cts.kind": "job"}, job_dir=job_dir
    ) as run_id:
        tracking.log_metrics({"second": 2.0})
    assert job_dirs([tmp_path]) == []
    runs = tracking.mlflow_module().MlflowClient(uri).search_runs([tracking.experiment_id(uri, "exp") or ""])
    assert [(r.info.run_id, r.info.status, r.data.metrics) for r in runs] == [
        (run_id, "FINISHED", {"first": 1.0, "second": 2.0})
    ]


def _job_whose_store_went_down(tmp_path: Path) -> tuple[str, str, Path, tracking.TrackingStoreError]:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    job_dir = tmp_path / "job"
    error, run_id = None, ""
    try:
        with tracking.open_mlflow_run(
            tracking.Experiment(uri, "exp"), "job", {"p": "1"}, {"cts.kind": "job"}, job_dir=job_dir
        ) as run_id:
            tracking.log_metrics({"before": 1.0})
            _outbox.mark_down(uri, "ConnectionRefusedError: gone")  # as a failed call and a probe find it
            (job_dir / "summary.json").write_text('{"score_mean": 2.0}', encoding="utf-8")
            with tracking.deferred_run_data():
                tracking.log_metrics({"score_mean": 2.0, "大": 3.0})
                tracking.set_tags({"stop_reason": "done", "cts.note": "澄清"})
                tracking.log_artifacts([job_dir / "summary.json"])
    except tracking.TrackingStoreError as e:
        error = e
    assert error is not None
    return uri, run_id, job_dir, error


# --------------------------------------------------------------------------- a real server killed mid-sweep

REPO = Path(__file__).resolve().parents[2]
TOTAL = 12  # 4 jobs x 3 instances


def start_mlflow(root: Path, port: int) -> subprocess.Popen[bytes]:
    """``mlflow server`` on loopback over a SQLite store in ``root`` (the same store on every start)."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    cmd += ["--backend-store-uri", f"sqlite:///{root}/server.db", "--artifacts-destination", str(root / "artifacts")]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with (root / "server.log").open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    deadline = time.monotonic() + 120
    while server_down(f"http://127.0.0.1:{port}", 1.0) is not None:
        assert proc.poll() is None and time.monotonic() < deadline, (root / "server.log").read_text()[-2000:]
        time.sleep(0.3)
    return proc


def records_in(sweep: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in sweep.glob("*/records.jsonl"))


class Lines:
    """A process's output lines, each with the monotonic time it came."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append((time.monotonic(), line))

    def first(self, text: str) -> float | None:
        return next((t for t, line in self.lines if text in line), None)

    def text(self) -> str:
        self._thread.join(10)
        return "".join(line for _, line in self.lines)


@pytest.mark.slow
@pytest.mark.parametrize("interrupt", [False, True], ids=["finish", "ctrl-c"])
def test_a_server_killed_mid_sweep(tmp_path: Path, cache_dir: Path, interrupt: bool) -> None:
    """SIGKILL the tracking server mid-sweep: the jobs say so within seconds and finish their LLM work
    (or stop at a Ctrl-C within seconds); once it is back, the fill makes every run complete."""
    from tests.llm_fakes import ScriptedServer, sweep_reply

    port, root, sweep = free_port(), tmp_path / "server", tmp_path / "sweep"
    root.mkdir()
    server = start_mlflow(root, port)
    uri = f"http://127.0.0.1:{port}"
    with ScriptedServer(0.2) as llm:
        llm.handler = sweep_reply
        args = ["-m", "clarifier=gpt,ernie", "k=1,2", "limit=3", f"services.llm.api_base={llm.base_url}"]
        args += [f"paths.cache_dir={cache_dir}", "services.llm.cache.mode=off", f"tracking.uri={uri}"]
        args += [f"hydra.sweep.dir={sweep}", "hydra.launcher.progress=false", "sweep_report=false"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "run.py"), *args], cwd=tmp_path, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        out = Lines(proc)
        while records_in(sweep) < 3 and proc.poll() is None:
            time.sleep(0.1)
        llm.hold()  # no job can finish while the server dies
        os.killpg(server.pid, signal.SIGKILL)
        killed = time.monotonic()
        llm.release()
        if interrupt:
            time.sleep(1)
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    ended, text = time.monotonic(), out.text()
    said = out.first("stopped answering")
    assert said is not None and said - killed < 60, text[-4000:]
    if interrupt:
        assert proc.returncode == 130 and ended - killed < 20 and "resume with:" in text, text[-4000:]
        return
    assert proc.returncode == 1 and records_in(sweep) == TOTAL, text[-4000:]
    assert f"python -m cts.tracking.fill {sweep}" in text and "error: tracking: the MLflow store" in text
    server = start_mlflow(root, port)  # back, with the same store
    try:
        filled = run_script(["-m", "cts.tracking.fill", str(sweep)], env=env)
        assert filled.returncode == 0 and "filled " in filled.stdout, filled.stderr[-3000:]
        assert_complete(uri, sweep)
    finally:
        os.killpg(server.pid, signal.SIGKILL)


def assert_complete(uri: str, sweep: Path) -> None:
    """Every job dir's run is FINISHED with its summary's score, one trace per record, each assessed."""
    client = tracking.mlflow_module().MlflowClient(uri)
    tracking.mlflow_module().set_tracking_uri(uri)
    for job_dir in sorted(p.parent for p in sweep.glob("*/summary.json")):
        summary = json.loads((job_dir / "summary.json").read_text())
        run = client.get_run(summary["run_id"])
        assert run.info.status == "FINISHED" and run.data.metrics["score_mean"] == summary["metrics"]["score_mean"]
        traces = client.search_traces(
            locations=[run.info.experiment_id], filter_string=f"metadata.`mlflow.sourceRun` = '{run.info.run_id}'"
        )
        assert len(traces) == len((job_dir / "records.jsonl").read_text().splitlines()) == 3
        assert all(t.info.assessments and t.data.spans for t in traces)
        assert {"summary.json", "records.jsonl"} <= {f.path for f in client.list_artifacts(run.info.run_id)}
