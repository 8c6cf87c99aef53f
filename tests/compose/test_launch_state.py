"""A launch's pre-flight results serve its own jobs and end with it: the next launch checks again."""

from __future__ import annotations

import contextvars
import pickle
from types import SimpleNamespace

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cts._util.launch import Launch, current_launch
from cts.compose.callbacks import LaunchCallbacks
from cts.compose.probes import probe_endpoints
from tests.runs import REPO


def _llm_job(base_url: str):  # noqa: ANN202 - DictConfig
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=[f"services.llm.api_base={base_url}", "limit=1"])


def test_an_endpoint_is_probed_once_per_launch_and_again_in_the_next(llm_server, tmp_path) -> None:
    job = _llm_job(llm_server.base_url)
    launch = Launch.begin(str(tmp_path / "a"), multirun=True)
    probe_endpoints([job, job], launch.preflight)
    probe_endpoints([job], launch.preflight)  # a job of the same launch: nothing sent again
    assert len(llm_server.gets) == 1 and launch.preflight.probed
    following = Launch.begin(str(tmp_path / "b"), multirun=True)  # the next sweep in this process (a notebook)
    assert not following.preflight.probed  # the endpoint may have died since
    probe_endpoints([job], following.preflight)
    assert len(llm_server.gets) == 2


def test_a_launch_is_seen_by_its_own_context_only(tmp_path) -> None:
    launch = Launch.begin(str(tmp_path), multirun=True)
    with launch.bound():
        assert current_launch() is launch
        assert contextvars.Context().run(current_launch) is None  # a thread the launcher did not start
        assert launch.context().run(current_launch) is launch  # a job thread of the launcher
    assert current_launch() is None


def test_the_callbacks_reach_workers_without_the_launch(tmp_path) -> None:
    callbacks = LaunchCallbacks()
    callbacks._begin(Launch.begin(str(tmp_path), multirun=True))
    try:
        assert callbacks.launch is not None and current_launch() is callbacks.launch
        copy = pickle.loads(pickle.dumps(callbacks))  # what joblib and submitit send their workers
        assert copy.launch is None
    finally:
        callbacks._end()
    assert callbacks.launch is None and current_launch() is None


def test_the_cts_launcher_takes_the_launch_the_callbacks_began(tmp_path) -> None:
    from hydra_plugins.cts_scheduler.cts_scheduler_launcher import _launch_of

    overrides = {"task": ["k=1,2", "seed=0"], "hydra": []}
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "overrides": overrides}})
    callbacks = LaunchCallbacks()
    launch = callbacks._begin(Launch.begin(str(tmp_path), ("k",), multirun=True))
    try:
        assert _launch_of(SimpleNamespace(callbacks=SimpleNamespace(callbacks=[callbacks])), config) is launch
    finally:
        callbacks._end()
    own = _launch_of(SimpleNamespace(callbacks=SimpleNamespace(callbacks=[])), config)  # no cts callbacks configured
    assert own is not launch and own.record.swept == ("k",) and own.sweep_dir == str(tmp_path)
    assert f"hydra.sweep.dir={tmp_path}" in config.hydra.overrides.hydra  # pinned, as the callbacks pin it


def test_a_sweep_session_is_its_launchs_while_it_is_open(tmp_path) -> None:
    from cts.sweep import SweepSession, current_session

    launch = Launch.begin(str(tmp_path), multirun=True)
    with launch.bound():
        with SweepSession(progress=False) as session:
            assert launch.session is session and current_session() is session
            assert launch.context().run(current_session) is session  # a job thread of the launcher
        assert launch.session is None and current_session() is None
    with SweepSession(progress=False) as alone:  # opened on its own (a test, a notebook): a launch of its own
        assert current_session() is alone and current_launch() is not None
    assert current_launch() is None


def test_a_run_that_fails_its_checks_ends_the_trace_writer_it_started_and_creates_no_store(tmp_path) -> None:
    import pytest

    from cts.tracking import _writer

    db = tmp_path / "mlflow.db"
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        config = compose(
            "config",
            overrides=["plan.enabled=true", "plan.then=stop", f"tracking.uri=sqlite:///{db}"],
            return_hydra_config=True,
        )
    started = []
    real = _writer.TraceWriter

    def spy(uri: str, open_store: bool = True, in_process_docs: int = _writer.IN_PROCESS_DOCS) -> _writer.TraceWriter:
        started.append(real(uri, open_store=open_store, in_process_docs=in_process_docs))
        return started[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_writer, "TraceWriter", spy)
        with pytest.raises(SystemExit):  # plan=only needs -m: refused by the checks
            LaunchCallbacks().on_run_start(config)
    assert len(started) == 1 and started[0].held  # started before the checks, never opened
    assert f"sqlite:///{db}" not in _writer._WRITERS
    assert started[0]._proc is None  # nothing written: no writer process was started
    assert not db.exists()


def test_a_sweep_of_few_traced_instances_writes_them_itself_and_a_larger_one_starts_the_writer_process_at_once() -> (
    None
):
    from cts.compose.launch.steps import _docs_here
    from cts.tracking import IN_PROCESS_DOCS

    def jobs(*shapes: tuple[int | None, int]) -> tuple:
        return tuple(OmegaConf.create({"limit": limit, "repeats": repeats}) for limit, repeats in shapes)

    assert IN_PROCESS_DOCS == 256
    assert _docs_here(jobs((None, 1)), multirun=False) == IN_PROCESS_DOCS  # a single run: always here first
    assert _docs_here(jobs((128, 1), (128, 1)), multirun=True) == IN_PROCESS_DOCS  # 256 in all
    assert _docs_here(jobs((128, 1), (129, 1)), multirun=True) == 0
    assert _docs_here(jobs((100, 3)), multirun=True) == 0  # repeats trace each instance again
    assert _docs_here(jobs((5, 1), (None, 1)), multirun=True) == 0  # a job of the whole dataset: unknown
