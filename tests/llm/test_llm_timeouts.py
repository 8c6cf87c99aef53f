"""Slow and stuck calls are bounded and visible: per-role timeouts, few timed-out retries, a breaker
that stops a job whose calls keep timing out, and the calls in flight on the progress bar."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cts.compose.services import Services
from cts.core.types import CallError, CircuitOpen, Instance
from cts.llm import InFlight, LLMRuntime, LLMSettings, ModelSpec, calls_in_flight
from cts.llm._breaker import CircuitBreaker
from cts.protocol import streaming
from cts.protocol.job_files import INFRA_FILE
from cts.protocol.pipeline import Roles, run_instances
from cts.protocol.settings import InstanceSettings, JobSettings
from cts.roles.lexical import LexicalJudge
from cts.roles.llm import LLMClarifier
from cts.roles.rules import RuleRewriter, RuleUserAnswerer
from cts.sweep._progress import SweepProgress
from tests.helpers import TableSearch, Typer, built, gold_for
from tests.llm_server import Reply, ScriptedServer, llm_settings

REPO = Path(__file__).resolve().parents[2]
SPEC = ModelSpec(name="m", id="openai/m")
MESSAGES = [{"role": "user", "content": "Which year?"}]
QUESTIONS = '["Which planet or element do you mean?"]'


@pytest.fixture(params=["litellm", "openai"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_role_timeout_applies_to_that_role_only() -> None:
    settings = LLMSettings.from_mapping({"timeout_s": 50, "role_timeout_s": {"search": 300, "ua": 20}})
    assert (settings.timeout_for("search"), settings.timeout_for("ua"), settings.timeout_for("judge")) == (300, 20, 50)


def test_a_spend_limit_stop_lets_the_longest_role_timeout_settle(tmp_path: Path) -> None:
    from cts.compose.app import llm_spend_limit

    llm = {"timeout_s": 120, "role_timeout_s": {"search": 300, "ua": 60, "judge": None}}
    assert llm_spend_limit(Services(cache_dir=tmp_path, settings={"llm": llm})).timeout_s == 300


def test_role_timeouts_reach_the_request(llm_server: ScriptedServer, tmp_path: Path, transport: str) -> None:
    llm_server.default = Reply("late", delay_s=1.0)
    settings = llm_settings(
        llm_server,
        transport=transport,
        timeout_s=5.0,
        role_timeout_s={"ua": 0.3},
        max_attempts=6,
        max_timeout_attempts=2,
    )
    rt = LLMRuntime.from_settings(settings, tmp_path)

    async def go() -> tuple[BaseException | None, str]:
        try:
            await rt.client(SPEC, "ua").complete(MESSAGES)
            failed = None
        except CallError as exc:
            failed = exc
        return failed, (await rt.client(SPEC, "clarifier").complete(MESSAGES)).text

    failed, slow_but_in_time = asyncio.run(go())
    assert isinstance(failed, CallError) and failed.kind == "timeout", failed
    assert "no answer within 0.3 s" in failed.message and "after 2 attempt(s)" in failed.message
    first, second, clarifier = llm_server.requests  # ua: max_timeout_attempts = 2, although max_attempts = 6
    assert second.time - first.time < 3  # a 0.3 s timeout and a short backoff, not timeout_s = 5
    assert slow_but_in_time == "late"  # the clarifier's calls keep timeout_s = 5
    if transport == "litellm":  # the OpenAI SDK under litellm states the timeout it was given
        stated = [r.headers["x-stainless-read-timeout"] for r in (first, second, clarifier)]
        assert stated == ["0.3", "0.3", "5.0"]


def test_timed_out_attempts_have_their_own_small_allowance(llm_server: ScriptedServer, tmp_path: Path) -> None:
    llm_server.script(Reply.error(503), Reply.error(503), Reply("late", delay_s=1.0), Reply.error(503), "done")
    settings = llm_settings(llm_server, timeout_s=0.3, max_attempts=6, max_timeout_attempts=2)
    reply = asyncio.run(LLMRuntime.from_settings(settings, tmp_path).client(SPEC, "judge").complete(MESSAGES))
    assert reply.text == "done" and len(llm_server.requests) == 5  # one timeout among other failures is retried


def test_the_breaker_counts_timeouts_apart() -> None:
    breaker = CircuitBreaker(threshold=20, timeout_threshold=3)
    for kind in ("timeout", "timeout", "connection", "timeout", "timeout"):  # a refusal breaks the streak
        breaker.failure("e", kind, "x")
    breaker.success("e")  # an answer resets both counts
    breaker.failure("e", "timeout", "ReadTimeout: no answer within 2 s")
    breaker.failure("e", "timeout", "ReadTimeout: no answer within 2 s")
    assert breaker.open_endpoints == ()
    breaker.failure("e", "timeout", "ReadTimeout: no answer within 2 s")
    assert breaker.open_endpoints == ("e",)
    breaker.failure("e", "connection", "later failures do not rewrite why it opened")
    with pytest.raises(
        CircuitOpen,
        match=r"last: timeout: ReadTimeout: no answer within 2 s "
        r"\(3 timeouts in a row: services.llm.breaker_timeouts\)$",
    ):
        breaker.check("e")
    assert CircuitBreaker(threshold=20, timeout_threshold=None)._open == set()


def llm_job(
    server: ScriptedServer, tmp_path: Path, core: Services, n: int, concurrency: int, progress: Any = False, **llm: Any
) -> tuple[list[Any], str, float]:
    """A job of ``n`` instances whose clarifier is an LLM on ``server`` (every other role offline).

    Returns its records, its stop reason and how long it ran (its set-up excluded).
    """
    services = Services(cache_dir=tmp_path / "cache", settings={"llm": llm_settings(server, **llm)})
    spec = {"name": "m", "id": "openai/m", "api_base": None, "api_key_env": None}
    roles = Roles(
        clarifier=built(LLMClarifier, services, model=spec, prompt="clarifier"),
        ua=built(RuleUserAnswerer, core),
        rewriter=RuleRewriter(),
        search=TableSearch({}),
        judge=LexicalJudge(),
        qtyper=Typer(),
    )
    insts = [
        Instance(f"i{j}", f"Tell me about Mercury {j}", f"Tell me about Mercury {j}, the planet") for j in range(n)
    ]
    gold = {i.id: gold_for(i.id, ("Mercury is a planet", 1)) for i in insts}
    start = time.monotonic()
    records, stop = asyncio.run(
        run_instances(
            insts,
            gold,
            roles,
            InstanceSettings(1),
            JobSettings(tmp_path / "job", concurrency=concurrency, progress=progress),
        )
    )
    return records, stop, time.monotonic() - start


@pytest.mark.serial  # a wall-time bound
def test_a_job_whose_server_never_answers_in_time_stops_within_a_computed_bound(
    llm_server: ScriptedServer, tmp_path: Path, services: Services
) -> None:
    llm_server.default = Reply("late", delay_s=30)  # never in time
    timeout, n_timeouts, backoff = 0.3, 4, {"initial": 0.05, "max": 0.05, "jitter": 0.0}
    records, stop, took = llm_job(
        llm_server,
        tmp_path,
        services,
        n=40,
        concurrency=2,
        timeout_s=timeout,
        breaker_timeouts=n_timeouts,
        breaker_failures=20,
        backoff=backoff,
    )
    # at worst one request at a time: each timeout takes `timeout`, each retry waits the backoff
    bound = n_timeouts * (timeout + backoff["max"])
    assert stop == "circuit_open" and records == []
    assert took < bound + 1.0, (took, bound)  # + the instances' own work
    assert n_timeouts <= len(llm_server.requests) <= n_timeouts + 2  # plus those in flight when it opened
    last = json.loads((tmp_path / "job" / INFRA_FILE).read_text().splitlines()[-1])
    assert last["kind"] == "circuit_open" and last["endpoint"] == llm_server.base_url
    assert f"{n_timeouts} timeouts in a row" in last["message"] and f"no answer within {timeout:g} s" in last["message"]


@pytest.mark.slow
def test_run_py_against_a_server_that_never_answers_exits_1_naming_the_breaker(
    llm_server: ScriptedServer, tmp_path: Path, cache_dir: Path
) -> None:
    llm_server.default = Reply("late", delay_s=600)
    args = [
        sys.executable,
        str(REPO / "run.py"),
        "experiment=offline",
        "clarifier=ernie",
        "limit=20",
        f"services.llm.api_base={llm_server.base_url}",
        "services.llm.role_timeout_s.clarifier=0.5",
        "services.llm.breaker_timeouts=3",
        "services.llm.preflight_completion=false",  # the job's own calls
        f"hydra.run.dir={tmp_path}/run",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={cache_dir}",
        f"services.llm.cache.path={tmp_path}/llm_cache.sqlite",
    ]
    start = time.monotonic()
    proc = subprocess.run(
        args,
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"},
    )
    took = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr[-3000:]
    # timeout_s stays 120: had the clarifier's 0.5 s not reached the request, one timeout alone would take 120 s
    assert took < 90, took
    tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
    assert "INCOMPLETE: 0 of 20" in tail and "circuit breaker stopped the job" in tail, tail
    assert "3 timeouts in a row" in tail and "no answer within 0.5 s" in tail and llm_server.base_url in tail, tail
    assert len(llm_server.requests) <= 3 + 8  # the timeouts that opened it, plus the calls then in flight


# ---------------------------------------------------------------- progress


class Recorder:
    """A shared progress display that keeps what it is told."""

    def __init__(self) -> None:
        self.seen: list[InFlight] = []

    def add(self, total: int, done: int) -> None:
        pass

    def advance(self, record: Any) -> None:
        pass

    def calls(self, in_flight: InFlight) -> None:
        self.seen.append(in_flight)


def test_calls_in_flight_counts_requests_on_the_wire_and_the_oldest_age(
    llm_server: ScriptedServer, tmp_path: Path
) -> None:
    llm_server.latency_s = 0.6
    client = LLMRuntime.from_settings(llm_settings(llm_server), tmp_path).client(SPEC, "judge")

    async def go() -> tuple[InFlight, InFlight]:
        calls = [asyncio.ensure_future(client.complete([{"role": "user", "content": f"q{i}"}])) for i in range(3)]
        await asyncio.sleep(0.4)
        during = calls_in_flight()
        await asyncio.gather(*calls)
        return during, calls_in_flight()

    during, after = asyncio.run(go())
    assert during.calls == 3 and 0.3 <= during.oldest_s < 0.6
    assert after == InFlight(0, 0.0)


def test_the_progress_shows_the_calls_in_flight_and_the_age_of_the_oldest(
    llm_server: ScriptedServer,
    tmp_path: Path,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    llm_server.default = Reply(QUESTIONS, delay_s=0.8)
    monkeypatch.setattr(streaming, "CALLS_EVERY_S", 0.1)
    shared = Recorder()
    records, stop, _ = llm_job(llm_server, tmp_path, services, n=2, concurrency=2, progress=shared)
    assert stop == "done" and len(records) == 2
    assert max(s.calls for s in shared.seen) == 2  # both instances' clarifier calls, on the wire at once
    assert max(s.oldest_s for s in shared.seen) >= 0.5  # the age grows while the call hangs

    llm_job(llm_server, tmp_path / "own_bar", services, n=1, concurrency=1, progress=True)
    assert "in_flight=1, oldest=" in capsys.readouterr().err  # a job's own bar (tqdm's postfix)


def test_the_sweep_bar_shows_calls_in_flight_beside_requests_and_cost() -> None:
    class Session:
        def totals(self) -> tuple[float, float]:
            return 12.0, 0.5

    bar = SweepProgress(Session(), enabled=False)  # type: ignore[arg-type]
    bar.calls(InFlight(3, 41.6))
    bar.advance(None)  # type: ignore[arg-type]
    assert bar._postfix == {"in_flight": "3", "oldest": "42s", "requests": "12", "usd": "0.5000"}
    bar.close()
