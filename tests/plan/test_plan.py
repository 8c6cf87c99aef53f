"""The forecast's arithmetic, its tables and its config (fast; the sweep itself: tests/test_plan_sweep.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from scipy import stats

from cts.compose.validate import value_problems
from cts.plan.calibrate import PlanSettings, calibration_command, plan_settings
from cts.plan.forecast import InstanceCost, Interval, JobSlice, Timing, forecast_job, forecast_sweep, sum_interval
from cts.plan.samples import routes_of
from cts.plan.table import comparison_markdown, forecast_csv, forecast_markdown
from tests.conftest import REPO


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def cost(iid: str, calls: float, usd: float = 0.0, latency: float = 0.2, elapsed: float = 1.0) -> InstanceCost:
    counts = {"calls": calls, "tokens_in": 100 * calls, "tokens_out": 10 * calls, "tokens_reasoning": 0.0, "usd": usd}
    return InstanceCost(iid, counts, {"e": calls}, (latency,) * int(calls), elapsed)


def test_sum_interval_is_the_t_interval_of_a_sum_of_new_draws() -> None:
    values = [10.0, 12.0, 14.0, 16.0, 18.0]
    iv = sum_interval(values, 45)
    half = stats.t.ppf(0.975, 4) * math.sqrt(10.0) * math.sqrt(45 + 45**2 / 5)
    assert iv.expected == pytest.approx(45 * 14.0) and iv.high - iv.expected == pytest.approx(half)
    assert sum_interval(values, 0) == Interval(0.0, 0.0, 0.0)
    assert sum_interval([7.0] * 5, 10) == Interval(70.0, 70.0, 70.0)


def test_work_shared_between_jobs_is_forecast_on_the_sweep_totals() -> None:
    """Job a pays the orig arm of even instances, job b of odd ones: each job varies, their sum does not."""
    a = JobSlice("a", 50, 5, tuple(cost(f"q{i}", 10 if i % 2 == 0 else 4) for i in range(5)), concurrency={"e": 32})
    b = JobSlice("b", 50, 5, tuple(cost(f"q{i}", 4 if i % 2 == 0 else 10) for i in range(5)), concurrency={"e": 32})
    job, sweep = forecast_job(a, Timing()), forecast_sweep([a, b], Timing())
    assert job.calls.high > job.calls.expected > job.calls.low
    assert sweep.calls == Interval(14 * 45, 14 * 45, 14 * 45) and sweep.n_paid == 90


def test_wall_time_is_the_busiest_endpoint_queue_or_the_critical_path_plus_overhead() -> None:
    jobs = [
        JobSlice(
            f"j{j}",
            105,
            5,
            tuple(cost(f"q{i}", 8, elapsed=1.6) for i in range(5)),
            concurrency={"e": 32},
            job_concurrency=64,
        )
        for j in range(4)
    ]
    wall = forecast_sweep(jobs, Timing(overhead_s=3.0)).wall_s
    assert wall.expected == pytest.approx(3.0 + 4 * 100 * 8 * 0.2 / 32)  # queue: 25 s > 2 rounds x 1.6 s
    assert wall.low == pytest.approx(4 * 100 * 8 * 0.2 / 32)  # the bound alone: no overhead
    cpu_bound = forecast_sweep(jobs, Timing(overhead_s=3.0, cpu_per_call_s=0.05)).wall_s
    assert cpu_bound.expected == wall.expected and cpu_bound.high == pytest.approx(3.0 + 4 * 100 * 8 * 0.05)
    few = [JobSlice("j", 10, 5, tuple(cost(f"q{i}", 8, elapsed=1.6) for i in range(5)), concurrency={"e": 32})]
    assert forecast_sweep(few, Timing(overhead_s=3.0)).wall_s.expected == pytest.approx(3.0 + 1.6)


def test_a_model_without_a_price_makes_the_usd_unknown_never_zero() -> None:
    cfg = composed("clarifier=gpt")  # the default stack: WebDancer is self-hosted, without a price
    routes = routes_of(cfg, ("clarifier", "ua", "rewriter", "search", "judge", "qtyper"))
    assert routes.unpriced == {"search.model": "webdancer", "search.summary_model": "webdancer"}
    assert routes.unpriced_used(["clarifier"]) == () and routes.unpriced_used(["search"]) == ("webdancer",)
    own = routes_of(composed("clarifier=gpt", "services.llm.api_base=http://127.0.0.1:9/v1"), ("clarifier",))
    assert set(own.unpriced.values()) == {"gpt"} and set(own.endpoint.values()) == {"http://127.0.0.1:9/v1"}
    priced = composed(
        "clarifier=gpt",
        "services.llm.api_base=http://127.0.0.1:9/v1",
        "services.llm.api_base_price.input_cost_per_token=1e-7",
    )
    assert not routes_of(priced, ("clarifier",)).unpriced

    samples = tuple(cost(f"q{i}", 4, usd=0.002) for i in range(5))
    free = JobSlice("clarifier=pfree", 20, 5, samples, unpriced=("pfree",), concurrency={"e": 8})
    paid = JobSlice("clarifier=pa", 20, 5, samples, concurrency={"e": 8})
    jobs = [forecast_job(free, Timing()), forecast_job(paid, Timing())]
    sweep = forecast_sweep([free, paid], Timing())
    table = forecast_markdown(jobs, sweep, 0.95)
    free_row = next(line for line in table.splitlines() if line.startswith("| clarifier=pfree"))
    assert "unknown (no price: pfree; priced models $0.0300" in free_row and "| $0.0300 [" in table
    assert "**sweep**" in table and table.splitlines()[-1].count("unknown (no price: pfree") == 1
    assert "unknown: no price for pfree" in forecast_csv(jobs, sweep)
    assert "| usd | unknown" in comparison_markdown(sweep, {"usd": 0.06}) and "n/a" in comparison_markdown(
        sweep, {"usd": 0.06}
    )


def test_plan_config_is_a_node_that_plan_true_switches_on() -> None:
    assert plan_settings(composed()).enabled is False and plan_settings(composed()).calibration_n == 5
    assert plan_settings(composed("plan=true")).enabled is True
    assert plan_settings(composed("plan.enabled=true", "plan.calibration_n=10")).calibration_n == 10
    assert value_problems(composed("plan=true")) == []
    problems = value_problems(
        composed("plan.calibration_n=0", "plan.confidence=1.5", "services.llm.spend.allow_over_forecast=2")
    )
    assert sorted(p.split(":")[0] for p in problems) == [
        "plan.calibration_n",
        "plan.confidence",
        "services.llm.spend.allow_over_forecast",
    ]


def test_planning_does_not_change_what_a_job_measures() -> None:
    from cts.compose.job_config import protocol_fingerprint

    assert protocol_fingerprint(composed("plan=true")) == protocol_fingerprint(composed())


def test_the_calibration_is_the_same_command_on_a_few_instances_in_its_own_dir(tmp_path: Path) -> None:
    argv = [
        "--config-dir",
        "x",
        "-m",
        "clarifier=a,b",
        "limit=50",
        "plan=true",
        "plan.calibration_n=3",
        f"hydra.sweep.dir={tmp_path}/s",
        "tracking.experiment=e",
    ]
    command = calibration_command(argv, 3, tmp_path / "s.plan" / "calibration", "e")
    assert command[2:] == [
        "--config-dir",
        "x",
        "-m",
        "clarifier=a,b",
        "limit=3",
        "plan.calibration=true",
        "sweep_report=false",
        f"hydra.sweep.dir={tmp_path}/s.plan/calibration",
        "tracking.experiment=e.plan",
    ]


def test_an_earlier_run_stands_in_for_the_slice(tmp_path: Path) -> None:
    """plan.source: its records are the samples, its instances are free (cached), its actuals give the timing."""
    import json

    from cts.plan.calibrate import JobPlan, slices_from
    from cts.plan.samples import Routes

    source, sweep = tmp_path / "earlier", tmp_path / "sweep"
    (source / "clarifier=a").mkdir(parents=True)
    usage = {
        "clarifier": {"calls": 1, "requests": 1, "tokens_in": 100, "tokens_out": 10, "cost_usd": 0.01, "latency_s": 0.2}
    }
    rows = [json.dumps({"id": f"q{i}", "k": 1, "usage": usage, "elapsed_s": 1.0}) for i in range(5)]
    (source / "clarifier=a" / "records.jsonl").write_text("\n".join(rows) + "\n")
    (source / "sweep_actual.json").write_text(json.dumps({"wall_s": 10.0, "cpu_s": 2.0, "calls": 5}))
    (sweep / "clarifier=a").mkdir(parents=True)
    (sweep / "clarifier=a" / "records.jsonl").write_text(json.dumps({"id": "q7", "k": 1, "usage": {}}) + "\n")
    job = JobPlan("clarifier=a", tuple(f"q{i}" for i in range(20)), Routes({}, {"e": 4}, {}), 8, sweep / "clarifier=a")
    (slice_,), timing = slices_from(source, [job])
    assert slice_.n_free == 6 and slice_.remaining == 14 and len(slice_.samples) == 5  # q0-q4 cached, q7 recorded
    assert timing.cpu_per_call_s == pytest.approx(0.4) and timing.overhead_s == pytest.approx(
        10.0 - 1.0
    )  # beyond its critical path
    assert forecast_job(slice_, timing).usd == Interval(0.14, 0.14, 0.14)


def write_records(job_dir: Path, rows: list[dict]) -> None:
    import json

    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "records.jsonl").write_text("".join(json.dumps({"k": 1, **r}) + "\n" for r in rows))


def usage(calls: int, usd: float = 0.0) -> dict:
    return {"clarifier": {"calls": calls, "requests": calls, "tokens_in": 100 * calls, "cost_usd": usd}}


@pytest.mark.parametrize("repeats", [1, 2, 3])
def test_each_repeat_is_a_run_the_forecast_counts(tmp_path: Path, repeats: int) -> None:
    """20 instances x R repeats; the slice ran 2 instances x R (a repeat's record carries ``repeat``, 0 left out)."""
    from cts.plan.calibrate import JobPlan, slices_from
    from cts.plan.samples import Routes

    source, sweep = tmp_path / "slice", tmp_path / "sweep"
    rows = [
        {"id": f"q{i}", **({"repeat": r} if r else {}), "usage": usage(3)} for i in range(2) for r in range(repeats)
    ]
    write_records(source / "j", rows)
    write_records(sweep / "j", [{"id": "q9", "usage": usage(3)}])  # an earlier run's repeat 0 of q9
    job = JobPlan("j", tuple(f"q{i}" for i in range(20)), Routes({}, {"e": 4}, {}), 8, sweep / "j", repeats)
    (slice_,), timing = slices_from(source, [job])
    assert (slice_.n_total, slice_.n_free, len(slice_.samples)) == (20 * repeats, 2 * repeats + 1, 2 * repeats)
    forecast = forecast_job(slice_, timing)
    assert forecast.n_paid == 18 * repeats - 1 and forecast.calls.expected == 3 * (18 * repeats - 1)


def spend_plan(tmp_path: Path, slice_usd: float, forecast_high: float):  # noqa: ANN201 - a SweepPlan
    from cts.plan.calibrate import JobPlan
    from cts.plan.samples import Routes
    from cts.plan.sweep import SweepPlan

    sweep = tmp_path / "sweep"
    jobs = tuple(JobPlan(n, ("q0", "q1"), Routes({}, {}, {}), 8, sweep / n) for n in ("a", "b"))
    from dataclasses import replace

    forecast = replace(
        forecast_job(JobSlice("sweep", 4, 2, ()), Timing()),
        usd=Interval(forecast_high / 2, forecast_high / 2, forecast_high),
    )
    return SweepPlan(sweep, jobs, {}, 0.0, forecast=forecast, slice_usd=slice_usd)


def test_the_spend_limit_counts_what_the_calibration_slice_spent(tmp_path: Path) -> None:
    """A $0.006 forecast high end fits a $0.01 cap alone; with the slice's $0.005 it does not."""
    from omegaconf import OmegaConf

    from cts.plan.sweep import _check_spend_limit, _slice_spent

    config = OmegaConf.create({"services": {"llm": {"spend": {"max_usd": 0.01}}}})
    plan = spend_plan(tmp_path, 0.0, 0.006)
    calibration = tmp_path / "sweep.plan" / "calibration"
    write_records(calibration / "a", [{"id": "q0", "usage": usage(2, 0.002)}])  # a fresh call booked in the slice
    write_records(calibration / "b", [{"id": "q0", "usage": usage(2, 0.002)}])
    (calibration / "b" / "spend.jsonl").write_text('{"unrecorded_usd": 0.001}\n')  # paid, no record (its ledger)
    write_records(tmp_path / "sweep" / "a", [{"id": "q0", "usage": usage(0, 0.0)}])  # the main run's cache hit: $0
    assert _slice_spent(plan, PlanSettings(enabled=True)) == pytest.approx(0.005)
    assert _slice_spent(plan, PlanSettings(enabled=True, source=str(calibration))) == 0.0  # plan.source sent nothing
    _check_spend_limit(config, plan)  # the forecast alone is within the cap
    plan = spend_plan(tmp_path, _slice_spent(plan, PlanSettings(enabled=True)), 0.006)
    with pytest.raises(SystemExit) as stop:
        _check_spend_limit(config, plan)
    assert str(stop.value).startswith(
        "error: plan: forecast high end $0.0060 + $0.0050 spent by the calibration slice = $0.0110 exceeds "
        "services.llm.spend.max_usd $0.0100 by $0.0010"
    )
    write_records(tmp_path / "sweep" / "b", [{"id": "q1", "usage": usage(1, 0.003)}])  # an earlier main run's spend
    with pytest.raises(SystemExit, match=r"\+ \$0\.0030 spent in the job dirs before = \$0\.0140 exceeds"):
        _check_spend_limit(config, spend_plan(tmp_path, 0.005, 0.006))
