"""plan=true with batched roles: the slice runs live, the forecast prices the batched roles at batch prices.

The repricing against a hand computation from a record's usage rows and the registry's prices
(conf/model/gpt.yaml, claude.yaml), the ``usd (batch)`` and ``wall_s (batch)`` columns, the
batched stages on a run's path, the spend check on the batch total, the slice's live command,
and the cache the slice fills serving the main run's batched roles with no request.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cts.llm import LLMRuntime, ModelSpec
from cts.llm.batch import BatchTerms
from cts.plan.batched import Pipeline, RoleRate, batched_stages, live_steps, rates_of, window_s
from cts.plan.calibrate import JobPlan, calibration_command, slices_from
from cts.plan.forecast import (
    BatchShape,
    InstanceCost,
    Interval,
    JobForecast,
    JobSlice,
    forecast_job,
    forecast_sweep,
)
from cts.plan.limit import spend_over
from cts.plan.samples import Routes, instance_cost, routes_of
from cts.plan.table import comparison_markdown, forecast_csv, forecast_markdown
from tests.conftest import REPO
from tests.llm_server import ScriptedServer, llm_settings

GPT = (1.75e-6, 1.4e-5, 8.75e-7, 7.0e-6)  # conf/model/gpt.yaml: live in, live out, batch in, batch out
CLAUDE = (3.0e-6, 1.5e-5, 1.5e-6, 7.5e-6)  # conf/model/claude.yaml
BATCHED = "services.llm.batch.roles=[ua,rewriter,judge]"
GROUPS = ("clarifier", "ua", "rewriter", "search", "judge", "qtyper")


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def row(requests: int, tokens_in: int, tokens_out: int, prices: tuple[float, ...]) -> dict[str, float]:
    """A usage row as the live slice books it: its fresh tokens at the model's live price."""
    cost = tokens_in * prices[0] + tokens_out * prices[1]
    return {"calls": requests, "requests": requests, "tokens_in": tokens_in, "tokens_out": tokens_out, "cost_usd": cost}


USAGE = {
    "clarifier": row(1, 900, 120, GPT),
    "ua": row(2, 1400, 60, GPT),
    "rewriter": row(1, 700, 40, GPT),
    "judge": row(2, 5000, 800, CLAUDE),
}
# By hand: the clarifier stays live; ua and rewriter at GPT's batch price, the judge at Claude's.
HAND_BATCH = (
    (900 * 1.75e-6 + 120 * 1.4e-5)
    + (1400 * 8.75e-7 + 60 * 7.0e-6)
    + (700 * 8.75e-7 + 40 * 7.0e-6)
    + (5000 * 1.5e-6 + 800 * 7.5e-6)
)
HAND_LIVE = (900 + 1400 + 700) * 1.75e-6 + (120 + 60 + 40) * 1.4e-5 + 5000 * 3.0e-6 + 800 * 1.5e-5


def card_routes(*extra: str) -> Routes:
    cfg = composed("clarifier=gpt", "ua=gpt", "rewriter=gpt", "judge=claude", "search=extractive", *extra)
    return routes_of(cfg, GROUPS)


def test_a_record_is_repriced_with_its_batched_roles_at_their_models_batch_prices() -> None:
    routes = card_routes(BATCHED)
    assert routes.batched == ("ua", "rewriter", "judge") and routes.batch_window_s == 24 * 3600
    assert routes.batch_rates["judge"] == RoleRate(prices=(1.5e-6, 7.5e-6))
    cost = instance_cost({"id": "q0", "usage": USAGE}, routes)
    assert cost.counts["usd"] == pytest.approx(HAND_LIVE)  # the live column: what the slice booked
    assert cost.counts["usd_batch"] == pytest.approx(HAND_BATCH)
    assert HAND_BATCH < HAND_LIVE and cost.counts["calls_live"] == 1  # only the clarifier's request stays live
    live = instance_cost({"id": "q0", "usage": USAGE}, card_routes())  # nothing batched: both columns the same
    assert not card_routes().batched and live.counts["usd_batch"] == live.counts["usd"] == pytest.approx(HAND_LIVE)
    assert live.counts["calls_live"] == live.counts["calls"] == 6


def test_a_panel_of_models_with_one_discount_scales_its_cost_and_differing_discounts_are_unknown() -> None:
    panel = card_routes(BATCHED, "judge=panel", "judge/members=[gpt,claude]")
    assert panel.batch_rates["judge"] == RoleRate(factor=0.5)  # both providers: half the live price
    cost = instance_cost({"id": "q0", "usage": USAGE}, panel)
    judge = USAGE["judge"]["cost_usd"]
    assert cost.counts["usd_batch"] == pytest.approx(HAND_BATCH - (5000 * 1.5e-6 + 800 * 7.5e-6) + judge / 2)
    odd = rates_of([("judge", (1e-6, 2e-6), (5e-7, 1e-6)), ("judge", (1e-6, 2e-6), (9e-7, 1.8e-6))], ["judge"])
    assert odd["judge"].unknown == "judge (its models' batch discounts differ)"
    assert rates_of([("judge", (0.0, 0.0), (0.0, 0.0))], ["judge"]) == {"judge": RoleRate(prices=(0.0, 0.0))}


def test_a_batched_role_of_a_model_without_a_price_is_unpriced_in_both_columns() -> None:
    routes = routes_of(composed("search=webdancer", "services.llm.batch.roles=[search]"), ("search",))
    usage = {"search": {"calls": 3, "requests": 3, "tokens_in": 9000, "tokens_out": 600, "cost_usd": 0.0}}
    job = JobSlice("j", 10, 2, (instance_cost({"id": "q0", "usage": usage}, routes),) * 2, unpriced=("webdancer",))
    job = replace(job, batch=BatchShape(("search",), 4, "24h", 86400.0))
    f = forecast_job(job)
    assert f.batch is not None and f.batch.unpriced == ("webdancer",)
    table = forecast_markdown([f], forecast_sweep([job]), 0.95)
    assert table.count("unknown (no price: webdancer; priced models $0.0000") == 4  # usd and usd (batch), job and sweep


def slice_dir(tmp_path: Path, n: int = 4) -> Path:
    source = tmp_path / "slice" / "job"
    source.mkdir(parents=True)
    rows = [{"id": f"q{i}", "k": 2, "usage": USAGE, "elapsed_s": 1.0} for i in range(n)]
    (source / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return source.parent


def test_the_forecast_sums_the_repriced_runs_with_the_jobs_batched_stages(tmp_path: Path) -> None:
    routes = card_routes(BATCHED)
    ids = tuple(f"q{i}" for i in range(40))
    job = JobPlan("job", ids, routes, 16, tmp_path / "sweep" / "job", pipeline=Pipeline(k=2))
    (sliced,) = slices_from(slice_dir(tmp_path), [job], per_job=4)
    assert sliced.batch == BatchShape(("ua", "rewriter", "judge"), 3, "24h", 86400.0)
    f = forecast_job(sliced)
    assert f.batch is not None and (f.batch.turnarounds, f.batch.waves) == (3 * 3, 3)  # 36 paid runs, 16 at a time
    assert f.usd == Interval(36 * HAND_LIVE, 36 * HAND_LIVE, 36 * HAND_LIVE)  # the same usage each run: no spread
    assert f.batch.usd.expected == pytest.approx(36 * HAND_BATCH) and f.batch.calls_live.expected == 36
    assert f.calls.expected == 36 * 6  # the calls column as today: every request of the run


@pytest.mark.parametrize(
    ("roles", "pipeline", "turns", "stages"),
    [
        (("ua", "rewriter", "judge"), Pipeline(), 0, 3),  # the orig arm's judge waits beside the UA's answers
        (("judge",), Pipeline(), 0, 2),  # the orig arm's judge, then the clarified arm's
        (("ua",), Pipeline(k=3, sequential=True), 0, 3),  # one answer per turn
        (("clarifier", "ua", "rewriter", "judge", "qtyper"), Pipeline(k=2, rewrite_arms=True), 0, 7),  # 3 + 1 + 2 + 1
        (("search", "judge"), Pipeline(), 5, 12),  # each agent turn a batch
        (("gate",), Pipeline(), 0, 0),  # not a stage of a run
    ],
)
def test_batched_stages_follow_a_runs_critical_path(
    roles: tuple[str, ...], pipeline: Pipeline, turns: int, stages: int
) -> None:
    assert batched_stages(roles, pipeline, turns) == stages


LIVE_WALL = Interval(20.0, 25.0, 31.0)


def batch_sweep(wall: Interval | None = LIVE_WALL, **batch: int) -> tuple[list[JobForecast], JobForecast]:
    samples = tuple(
        InstanceCost(
            f"q{i}",
            {
                "calls": 6,
                "tokens_in": 8000.0,
                "tokens_out": 1020.0,
                "tokens_reasoning": 0.0,
                "usd": 0.03 + 0.001 * i,
                "usd_batch": 0.016 + 0.0005 * i,
                "calls_live": 1.0,
            },
        )
        for i in range(5)
    )
    shape = BatchShape(("ua", "rewriter", "judge"), 3, "24h", 86400.0)
    slices = [JobSlice("k=1", 50, 5, samples, job_concurrency=64, batch=shape)]
    jobs = [forecast_job(j) for j in slices]
    sweep = forecast_sweep(slices)
    assert sweep.batch is not None
    sweep = replace(sweep, wall_s=Interval(30.0, 35.0, 41.0), batch=replace(sweep.batch, wall_live=wall, **batch))
    return jobs, sweep


def test_the_tables_put_the_batch_usd_after_the_usd_and_the_batch_wall_after_the_wall() -> None:
    jobs, sweep = batch_sweep()
    table = forecast_markdown(jobs, sweep, 0.95)
    head = "| job | runs | paid | calls | tokens_in | tokens_out | tokens_reasoning | usd | usd (batch) | wall_s | wall_s (batch) | note |"
    assert head in table.splitlines()
    cells = [c.strip() for c in table.splitlines()[-1].split("|")[1:-1]]
    # 45 runs x the means ($0.032, $0.017) +- t(0.975, 4) x sd x sqrt(45 + 45^2 / 5): sd $0.00158 and $0.00079
    assert cells[7] == "$1.4400 [1.3469-1.5331]" and cells[8] == "$0.7650 [0.7184-0.8116]"
    assert cells[9] == "35.0 [30.0-41.0]"
    assert cells[10] == "25.0 [20.0-31.0] + 3 batch turnarounds (each up to the 24h window): at most 259231.0"
    csv_rows = {(r[0], r[3]): r for r in (line.split(",") for line in forecast_csv(jobs, sweep).splitlines())}
    assert csv_rows[("sweep", "usd (batch)")][4:7] == ["0.718438", "0.765", "0.811562"]
    wall = csv_rows[("sweep", "wall_s (batch)")]
    assert wall[4:7] == ["20", "", "259231"]  # no expected value: a batch's time is not known before
    assert wall[7].startswith("the live part 25.0 [20.0-31.0] + 3 batch turnarounds (each up to the 24h window)")
    assert ("k=1", "wall_s (batch)") not in csv_rows  # the wall time is the sweep's
    actual = {"calls": 40.0, "usd": 0.75, "wall_s": 3600.0}  # batched roles: no live request, batch prices
    compared = comparison_markdown(sweep, actual)
    assert "| calls (live) | 45 [45-45] | 40 | no |" in compared
    assert "| usd (batch) | $0.7650 [0.7184-0.8116] | $0.7500 | yes |" in compared
    assert "| wall_s (batch) | 25.0 [20.0-31.0] + 3 batch" in compared and compared.rstrip().endswith(
        "| 3600.0 | yes |"
    )


def test_the_batch_wall_counts_the_rounds_of_runs_and_is_unknown_without_a_live_forecast() -> None:
    jobs, sweep = batch_sweep(turnarounds=6, waves=2)
    last = forecast_markdown(jobs, sweep, 0.95).splitlines()[-1]
    assert "+ 6 batch turnarounds (3 per run x 2 rounds of runs in flight; each up to the 24h window)" in last
    assert "at most 518431.0" in last  # 31 s + 6 x 24 h
    jobs, sweep = batch_sweep(wall=None)
    cells = [c.strip() for c in forecast_markdown(jobs, sweep, 0.95).splitlines()[-1].split("|")[1:-1]]
    assert cells[10] == "unknown" and "turnaround" not in forecast_csv(jobs, sweep)  # never a made-up time


def test_tables_of_a_sweep_that_batches_nothing_are_byte_for_byte_those_before_batch_mode() -> None:
    """The tables of cd37d1c (before this change) on the same forecasts: tests/fixtures/plan_tables_live.txt."""

    def cost(iid: str, calls: float, usd: float = 0.0) -> InstanceCost:
        counts = {"calls": calls, "tokens_in": 100 * calls, "tokens_out": 10 * calls, "tokens_reasoning": 0.0}
        return InstanceCost(iid, {**counts, "usd": usd}, {"e": calls}, (0.2,) * int(calls), 1.0)

    known = JobSlice("k=1", 40, 5, tuple(cost(f"q{i}", 6 + i % 3, usd=0.01 + 0.001 * i) for i in range(5)))
    lone = JobSlice("k=2", 40, 1, (cost("q0", 5, usd=0.02),), cut="cut short")
    free = JobSlice("k=3", 40, 5, tuple(cost(f"q{i}", 4, usd=0.002) for i in range(5)), unpriced=("pfree",))
    gone = JobSlice("k=4", 40, 0, (), missing="stopped")
    slices = [known, lone, free, gone]
    jobs = [forecast_job(j) for j in slices]
    sweep = replace(forecast_sweep(slices), wall_s=Interval(10.0, 12.5, 15.25), wall_note="measured")
    whole = replace(forecast_sweep([known]), wall_s=Interval(10.0, 12.5, 15.25), wall_note="measured")
    text = (
        forecast_markdown(jobs, sweep, 0.95)
        + "=====\n"
        + forecast_csv(jobs, sweep)
        + "=====\n"
        + forecast_markdown([jobs[0]], whole, 0.9)
        + "=====\n"
        + forecast_csv([jobs[0]], whole)
        + "=====\n"
        + comparison_markdown(whole, {"calls": 300, "usd": 0.5, "wall_s": 12.0})
    )
    assert sweep.batch is None and text == (REPO / "tests" / "fixtures" / "plan_tables_live.txt").read_text()


def test_the_spend_limit_is_checked_against_the_batch_totals_high_end() -> None:
    _, sweep = batch_sweep()
    assert sweep.usd.high > 1.0 > sweep.batch.usd.high  # live would not fit $1, batched does
    assert spend_over({"max_usd": 1.0}, sweep, 0.0, 0.0) is None
    over = spend_over({"max_usd": 0.8}, sweep, 0.0, 0.02)
    assert over == (
        "forecast high end (batch prices) $0.8116 + $0.0200 spent by the calibration slice = $0.8316 exceeds "
        "services.llm.spend.max_usd $0.8000 by $0.0316"
    )
    unpriced = replace(sweep, batch=replace(sweep.batch, unpriced=("judge (its models' batch discounts differ)",)))
    assert spend_over({"max_usd": 1.0}, unpriced, 0.0, 0.0) is None  # within for its priced part, with a warning


def test_the_slice_runs_live_whatever_the_sweep_batches(tmp_path: Path) -> None:
    argv = ["-m", "clarifier=a,b", BATCHED, "services.llm.batch.max_wait_s=1"]
    command = calibration_command(argv, 2, tmp_path, "e")
    assert BATCHED not in command and command.count("++services.llm.batch.roles=[]") == 1
    assert "services.llm.batch.max_wait_s=1" in command  # the other batch keys stay: they change nothing live
    assert window_s("24h") == 86400.0 and window_s("90m") == 5400.0


def test_live_steps_take_the_batched_stages_out_of_a_runs_round_trips() -> None:
    from cts.plan.schedule import Machine
    from cts.plan.walltime import Measured

    shape = BatchShape(("ua", "rewriter", "judge"), 3, "24h", 86400.0)
    slices = [JobSlice("a", 10, 0, (), batch=shape), JobSlice("b", 10, 0, ()), JobSlice("c", 10, 0, (), batch=shape)]
    measured = Measured(Machine(0.2, 8, 1.0, 0.0, 0.0), steps=(7, 5, 2))
    assert live_steps(measured, slices).steps == (4, 5, 1)


def test_the_slices_cached_replies_serve_the_main_runs_batched_roles_with_no_request(tmp_path: Path) -> None:
    """The cache key holds no batch setting: a batched judge finds the live slice's reply, and no batch is made."""
    spec = ModelSpec("m", "openai/m", params={"temperature": 0}, batch=BatchTerms("openai", 5e-7, 5e-7))
    messages = [{"role": "user", "content": "Is nugget 1 in the answer?"}]
    path = tmp_path / "cache.sqlite"

    def runtime(server: ScriptedServer, batch: dict) -> LLMRuntime:
        cache = {"mode": "read_write", "path": str(path)}
        return LLMRuntime.from_settings(llm_settings(server, cache=cache, batch=batch), tmp_path)

    with ScriptedServer() as server:
        server.default = "yes"
        live = runtime(server, {"roles": []})  # the slice
        first = asyncio.run(live.client(spec, "judge").complete(messages))
        batched = runtime(server, {"roles": ["judge"], "dir": str(tmp_path)})  # the main run
        assert batched.settings.batch.takes("judge")
        second = asyncio.run(batched.client(spec, "judge").complete(messages))
        assert len(server.requests) == 1 and [r.path for r in server.requests] == ["/v1/chat/completions"]
    assert (second.text, second.cached) == (first.text, True)
    usage = batched.usage()["judge"]
    assert (usage["requests"], usage["cache_hits"], usage["cost_usd"]) == (0, 1, 0.0)
    assert all(b.submitted == 0 for b in batched.batches.all()) and not (tmp_path / "llm_batches.jsonl").exists()
