"""The sweep session's shared pieces: one spend limit, one span per call, per-job logs, one composition, breakers."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf, ReadonlyConfigError

from cts import tracking
from cts.core.types import CallError, CircuitOpen, SpendLimitReached
from cts.llm import LLMRuntime, ModelSpec
from cts.protocol.spend import SPEND_FILE, SpendLimit, run_within_spend_limit
from cts.sweep import SweepSession
from cts.sweep._compose import MemoConfigLoader
from cts.sweep._joblog import routed_job_logs
from tests.llm_server import Reply, ScriptedServer, llm_settings

MESSAGES = [{"role": "user", "content": "Which year?"}]
PRICE = {"input_cost_per_token": 1e-3, "output_cost_per_token": 0.0}


def _spec(name: str = "gpt", api_base: str | None = None) -> ModelSpec:
    return ModelSpec(name=name, id=f"openai/{name}", api_base=api_base, params={"temperature": 0})


def _ask(rt: LLMRuntime, text: str, spec: ModelSpec | None = None) -> Any:
    return rt.client(spec or _spec(), "clarifier").complete([{"role": "user", "content": text}])


def test_prior_spend_of_every_job_dir_adds_up_against_the_sweep_spend_limit(
    llm_server: ScriptedServer, tmp_path: Path
) -> None:
    """Resuming a sweep: each job dir's earlier spend counts, and the cap is the sweep's."""
    llm_server.default = Reply("ok", tokens_in=10, tokens_out=0)  # 0.01 USD per call
    rt = LLMRuntime.from_settings(llm_settings(llm_server, spend={"max_usd": 0.05}, api_base_price=PRICE), tmp_path)
    limit = SpendLimit(max_usd=0.05, timeout_s=5.0, count_prior_spend=rt.count_prior_spend)
    dirs = [tmp_path / "clarifier=gpt,k=1", tmp_path / "clarifier=gpt,k=2"]
    for d in dirs:  # what the first run of the sweep paid in each job dir
        d.mkdir()
        (d / SPEND_FILE).write_text(json.dumps({"unrecorded_usd": 0.02}) + "\n")

    async def nothing() -> tuple[list[Any], str]:
        return [], "done"

    with SweepSession(progress=False):
        for d in dirs:  # each resumed job books its dir's prior spend on the shared runtime
            run_within_spend_limit(nothing, d, limit)
        run_within_spend_limit(nothing, dirs[0], limit)  # the same dir counted again is not added twice
    assert rt.prior_usd == pytest.approx(0.04)
    asyncio.run(_ask(rt, "first"))  # 0.04 + 0.01 = the cap
    with pytest.raises(SpendLimitReached, match="0.0400 by earlier runs"):
        asyncio.run(_ask(rt, "second"))
    assert len(llm_server.requests) == 1


def test_jobs_sharing_a_runtime_trace_each_llm_call_once(llm_server: ScriptedServer, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/m.db"
    rt = LLMRuntime.from_settings(llm_settings(llm_server), tmp_path)

    def sweep() -> None:
        with tracking.open_mlflow_run(tracking.Experiment(uri, "exp"), "traced", {}):
            with SweepSession(progress=False) as session:

                def job(i: int) -> None:
                    tracking.trace_llm_calls(rt)  # every job of the sweep asks for tracing
                    session.run(_ask(rt, f"question of job {i}"))

                threads = [threading.Thread(target=job, args=(i,)) for i in range(3)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            asyncio.run(_ask(rt, "a call of no traced job"))  # a fresh context: not traced

    contextvars.Context().run(sweep)  # keep this test's tracing flag out of the others
    traces = tracking.search_traces(uri, "exp")
    assert len(llm_server.requests) == 4 and len(traces) == 3  # one span per traced call, not one per job


def test_log_lines_of_concurrent_jobs_land_in_their_own_files(tmp_path: Path) -> None:
    log = logging.getLogger("cts.test.joblog")
    log.setLevel(logging.INFO)
    dirs = [tmp_path / f"job{i}" for i in range(3)]
    with routed_job_logs() as router, SweepSession(progress=False) as session:

        def job(i: int) -> None:
            with router.job(dirs[i], "run"):
                log.info("setting up job %d", i)

                async def instances() -> None:
                    async def one(n: int) -> None:
                        await asyncio.sleep(0.01 * ((n + i) % 3))
                        log.info("job %d instance %d", i, n)

                    await asyncio.gather(*(one(n) for n in range(5)))

                session.run(instances())  # the tasks of all jobs interleave on one loop

        threads = [threading.Thread(target=job, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        log.info("the launcher's own line")
    for i, d in enumerate(dirs):
        lines = (d / "run.log").read_text().splitlines()
        assert len(lines) == 6 and all(f"job {i}" in line for line in lines), lines
        assert "[cts.test.joblog][INFO] - setting up job" in lines[0]


def test_each_job_config_is_composed_once_read_only_to_readers_and_writable_to_its_taker() -> None:
    calls: list[list[str]] = []
    master = OmegaConf.create({"k": 1})

    class Loader:
        def load_sweep_config(self, master_config: Any, sweep_overrides: list[str]) -> Any:
            calls.append(sweep_overrides)
            return OmegaConf.merge(master_config, OmegaConf.from_dotlist(sweep_overrides))

        def other(self) -> str:
            return "delegated"

    loader = MemoConfigLoader(Loader())
    first = loader.load_sweep_config(master, ["k=2"])
    with pytest.raises(ReadonlyConfigError):  # a reader (the sweeper's check, the pre-flight) cannot change it
        first.k = 99
    again = loader.load_sweep_config(master, ["k=2"])
    assert again is first and again.k == 2 and calls == [["k=2"]] and loader.other() == "delegated"
    taken = loader.take_sweep_config(master, ["k=2"])  # the launcher's: its own to change
    taken.k = 99
    assert taken.k == 99 and calls == [["k=2"]]
    loader.load_sweep_config(OmegaConf.create({"k": 1}), ["k=2"])  # another sweep config: composed
    assert len(calls) == 2
    MemoConfigLoader(Loader()).load_sweep_config(master, ["k=2"])  # another launch's memo: composed again
    assert len(calls) == 3


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: nothing listens there


def test_a_dead_endpoint_opens_only_its_own_breaker_in_a_shared_runtime(
    llm_server: ScriptedServer, tmp_path: Path
) -> None:
    settings = llm_settings(llm_server, api_base=None, max_attempts=1, breaker_failures=2)
    rt = LLMRuntime.from_settings(settings, tmp_path)
    dead = _spec("dead", f"http://127.0.0.1:{_dead_port()}/v1")
    live = _spec("live", llm_server.base_url)

    async def jobs() -> tuple[list[Any], list[Any]]:
        on_dead = [await asyncio.gather(_ask(rt, f"d{i}", dead), return_exceptions=True) for i in range(4)]
        on_dead = [e for (e,) in on_dead]
        on_live = await asyncio.gather(*(_ask(rt, f"l{i}", live) for i in range(4)), return_exceptions=True)
        return on_dead, on_live

    on_dead, on_live = asyncio.run(jobs())
    assert [type(e) for e in on_dead] == [CallError, CallError, CircuitOpen, CircuitOpen]
    assert [c.text for c in on_live] == ["ok"] * 4
    assert rt.breaker.open_endpoints == (dead.api_base,)


@pytest.mark.parametrize(("overrides", "expected"), [(["k=1"], 32), (["k=1", "concurrency=4"], 4)])
def test_job_concurrency_fills_jobs_unless_the_user_set_concurrency(overrides: list[str], expected: int) -> None:
    from types import SimpleNamespace

    from hydra_plugins.cts_scheduler.cts_scheduler_launcher import CtsLauncher

    class Loader:
        def load_sweep_config(self, master_config: Any, sweep_overrides: list[str]) -> Any:
            return OmegaConf.merge(master_config, OmegaConf.from_dotlist(sweep_overrides))

    launcher = CtsLauncher(job_concurrency=32)
    launcher.config = OmegaConf.create({"k": 1, "concurrency": 8, "hydra": {"job": {"id": None, "num": None}}})
    launcher.hydra_context = SimpleNamespace(config_loader=Loader())  # type: ignore[assignment]
    assert launcher._job_config(0, overrides).concurrency == expected


def test_a_session_whose_loop_called_litellm_ends_without_waiting_out_its_drain(
    llm_server: ScriptedServer, tmp_path: Path
) -> None:
    """litellm's logging worker waits on its queue for ever: the drain stopped it, not its 30 s timeout."""
    from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER

    rt = LLMRuntime.from_settings(llm_settings(llm_server, transport="litellm"), tmp_path)
    session = SweepSession(progress=False)
    with session:
        reply = session.start(_ask(rt, "via litellm")).result(30)
        worker = GLOBAL_LOGGING_WORKER._worker_task
        assert worker is not None and worker.get_loop() is session.loop and not worker.done()
        start = time.monotonic()
    assert reply.text and time.monotonic() - start < 10, time.monotonic() - start
    assert worker.done()
