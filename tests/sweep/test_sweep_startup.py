"""A sweep's start-up: jobs send requests while they set up tracking; the cyclic GC waits for set-up."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from cts import tracking
from cts._util.startup import YOUNG_THRESHOLD, end_startup_gc
from cts.compose.launch.jobs import jobs_open_store_here
from cts.core.errors import ConfigError
from cts.llm import LLMRuntime, ModelSpec
from cts.protocol.spend import SPEND_FILE, SpendLimit, within_spend_limit
from cts.sweep import SweepSession, start_async
from tests.llm_fakes import protocol_reply
from tests.llm_server import Reply, ScriptedServer, llm_settings
from tests.protocol.spend_fakes import compose_job
from tests.runs import run_py

PRICE = {"input_cost_per_token": 1e-3, "output_cost_per_token": 0.0}


def test_a_started_job_runs_on_the_sweep_loop_before_anyone_waits_for_it() -> None:
    began = threading.Event()

    async def job() -> str:
        began.set()
        return "done"

    with SweepSession(progress=False):
        started = start_async(job())
        assert started.running and began.wait(5.0)  # it ran while this thread did something else
        assert started.result() == "done"


def test_outside_a_sweep_a_started_job_runs_only_when_its_result_is_asked() -> None:
    began = threading.Event()

    async def job() -> str:
        began.set()
        return "done"

    started = start_async(job())
    time.sleep(0.05)
    assert not started.running and not began.is_set()
    assert started.result() == "done" and began.is_set()


def test_a_failed_setup_stops_the_started_job_and_books_what_it_paid(tmp_path: Path) -> None:
    cancelled = threading.Event()
    with ScriptedServer() as server:
        server.default = Reply("ok", tokens_in=10, tokens_out=0)  # 0.01 USD per call
        rt = LLMRuntime.from_settings(llm_settings(server, api_base_price=PRICE), tmp_path)
        spec = ModelSpec(name="gpt", id="openai/gpt", api_base=None, params={})

        async def job() -> tuple[list[Any], str]:
            await rt.client(spec, "clarifier").complete([{"role": "user", "content": "Which year?"}])
            try:
                await asyncio.Event().wait()  # an instance still running when the set-up fails
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return [], "done"

        limit = SpendLimit(max_usd=None, timeout_s=5.0, count_prior_spend=rt.count_prior_spend)
        with (
            SweepSession(progress=False),
            pytest.raises(RuntimeError, match="store is broken"),
            within_spend_limit(job, tmp_path, limit),
        ):
            _wait_for(lambda: len(server.requests) == 1)
            time.sleep(0.1)  # the reply is booked
            raise RuntimeError("the store is broken")
        assert len(server.requests) == 1
    assert cancelled.is_set()
    booked = [json.loads(line) for line in (tmp_path / SPEND_FILE).read_text().splitlines()]
    assert booked == [
        {
            "unrecorded_usd": pytest.approx(0.01),
            "unrecorded": {
                "requests": 1,
                "tokens_in": 10,
                "tokens_out": 0,
                "tokens_reasoning": 0,
            },
            "stop_reason": "setup_failed",
            "time": booked[0]["time"],
        }
    ]


def _one_job_in_a_sweep(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, *, wait_for_a_request: bool, **changes: Any
) -> list[int]:
    """Run the evaluate job as a sweep's only job; return the requests served as its MLflow run opened.

    With ``wait_for_a_request`` the run opens only once the server has had a request (at most 10 s).
    """
    from cts.compose.app import build_services, run_configured_task

    real_open_mlflow_run = tracking.open_mlflow_run
    seen: list[int] = []
    with ScriptedServer() as server:
        server.handler = protocol_reply

        @contextlib.contextmanager
        def open_mlflow_run(*args: Any, **kwargs: Any) -> Iterator[str]:
            if wait_for_a_request:
                _wait_for(lambda: len(server.requests) > 0, timeout=10.0)
            seen.append(len(server.requests))
            with real_open_mlflow_run(*args, **kwargs) as run_id:
                yield run_id

        monkeypatch.setattr(tracking, "open_mlflow_run", open_mlflow_run)
        cfg = compose_job(tmp_path, cache_dir, server, max_usd=1000.0)
        for key, value in changes.items():
            OmegaConf.update(cfg, key, value)
        with SweepSession(progress=False) as session:
            session.expect_jobs(1)
            with session.job_turn():
                run_configured_task(cfg, build_services(cfg))
    return seen


def test_in_a_sweep_a_job_sends_requests_while_its_mlflow_run_is_set_up(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's MLflow run starts only once the job's first request has reached the server."""
    seen = _one_job_in_a_sweep(tmp_path, cache_dir, monkeypatch, wait_for_a_request=True)
    assert seen and seen[0] > 0
    summary = json.loads((tmp_path / "job" / "summary.json").read_text())
    assert summary["metrics"]["n_instances"] == 8 and summary["stop_reason"] == "done"


def test_instance_traces_do_not_hold_the_requests_back(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Instances traced into the job's run still start before it exists; their traces wait for it."""
    seen = _one_job_in_a_sweep(
        tmp_path, cache_dir, monkeypatch, wait_for_a_request=True, **{"tracking.instance_traces": True, "limit": 2}
    )
    assert seen and seen[0] > 0
    run_id = json.loads((tmp_path / "job" / "summary.json").read_text())["run_id"]
    traces = tracking.search_traces(f"sqlite:///{tmp_path / 'mlflow.db'}", "cts")
    linked = traces[traces["trace_metadata"].map(lambda m: m.get("mlflow.sourceRun")) == run_id]
    assert len(linked) == 2


@pytest.fixture
def gc_off() -> Iterator[None]:
    """The GC as ``run.py`` leaves it (off); restored afterwards."""
    was, threshold = gc.isenabled(), gc.get_threshold()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        if was:
            gc.enable()


def test_end_startup_gc_freezes_start_up_objects_and_turns_the_gc_on(gc_off: None) -> None:
    end_startup_gc()
    assert gc.isenabled() and gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # a request's short-lived objects die before a collection


def test_end_startup_gc_leaves_a_gc_that_is_on_alone() -> None:
    if not gc.isenabled():
        pytest.skip("the GC is off in this process")
    before, threshold = gc.get_freeze_count(), gc.get_threshold()
    end_startup_gc()
    assert gc.get_freeze_count() == before and gc.get_threshold() == threshold


def test_a_sweep_turns_the_gc_on_once_every_job_is_set_up(gc_off: None) -> None:
    async def job() -> None:
        return None

    with SweepSession(progress=False) as session:
        session.expect_jobs(2)

        def one_job(fail: bool) -> None:
            with contextlib.suppress(RuntimeError), session.job_turn():
                if fail:
                    raise RuntimeError("a job whose set-up failed counts as set up")
                session.run(job())

        first = threading.Thread(target=one_job, args=(False,))
        first.start()
        first.join()
        assert not gc.isenabled()  # one job still sets up
        second = threading.Thread(target=one_job, args=(True,))
        second.start()
        second.join()
        assert gc.isenabled()


def test_only_a_launcher_running_jobs_in_this_process_skips_the_parents_store_preparation() -> None:
    def cfg(target: str) -> Any:
        return OmegaConf.create({"hydra": {"launcher": {"_target_": target}}})

    assert jobs_open_store_here(cfg("hydra_plugins.cts_scheduler.cts_scheduler_launcher.CtsLauncher"))
    assert not jobs_open_store_here(cfg("hydra._internal.core_plugins.basic_launcher.BasicLauncher"))
    assert not jobs_open_store_here(cfg("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"))
    assert not jobs_open_store_here(cfg("no.such.Launcher"))


def _wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)


def test_a_single_job_turns_the_gc_back_on_as_it_starts(gc_off: None) -> None:
    """``run.py`` turns the GC off; a single job (here one that stops at once on bad input) turns it on."""
    from hydra import compose, initialize_config_dir

    from cts.compose.app import run

    with initialize_config_dir(version_base="1.3", config_dir=str(Path(__file__).resolve().parents[2] / "conf")):
        cfg = compose("config", overrides=["dataset=jsonl"])  # its path and gold_path are missing
    with pytest.raises(ConfigError):
        run(cfg)
    assert gc.isenabled()


SPY = """
import json, runpy, sys, threading
first = {}
class Spy:  # records the thread that first looks each module up
    def find_spec(self, name, path=None, target=None):
        first.setdefault(name, threading.current_thread().name)
        return None
sys.meta_path.insert(0, Spy())
sys.argv = [sys.argv[1], *sys.argv[2:]]
sys.path.insert(0, sys.argv[0].rsplit("/", 1)[0])  # as `python run.py` puts its dir first
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("IMPORTS " + json.dumps({m: first.get(m) for m in ("scipy.stats", "matplotlib", "cts.report.build")}))
"""


@pytest.mark.slow
def test_a_sweep_imports_what_its_jobs_ends_and_report_need_on_the_launching_thread(
    tmp_path: Path, cache_dir: Path
) -> None:
    """The report's modules are imported after the jobs, not beside their threads (CI once saw a list pass for a Mapping)."""
    out = run_py(
        "-m",
        "experiment=offline",
        "clarifier=rules_scope,none",
        "limit=3",
        "hydra/launcher=cts",
        "hydra.launcher.progress=false",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"paths.cache_dir={cache_dir}",
        cwd=tmp_path,
        python=("-c", SPY),
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("IMPORTS "))
    first = json.loads(line.removeprefix("IMPORTS "))
    # scipy.stats not at all: the jobs' ends and the report compute their intervals with numpy
    assert first == {"scipy.stats": None, "matplotlib": "MainThread", "cts.report.build": "MainThread"}
    assert (tmp_path / "sweep" / "report" / "report.md").is_file()  # the report ran (and imported them)


def test_planning_module_imports_leave_scipy_stats_for_the_forecast() -> None:
    import subprocess
    import sys

    code = "import sys, cts.plan, cts.compose.callbacks; print('scipy.stats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"  # about 0.5 s of a sweep's start, paid only by a forecast
