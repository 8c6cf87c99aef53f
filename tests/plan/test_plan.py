"""The forecast's arithmetic, what it does not know, its tables and its config (fast; the sweeps: test_plan_sweep.py)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from scipy import stats

from cts.compose.validate import value_problems
from cts.plan.calibrate import JobPlan, PlanSettings, calibration_command, plan_settings, slices_from
from cts.plan.forecast import InstanceCost, Interval, JobSlice, forecast_job, forecast_sweep, sum_interval
from cts.plan.limit import slice_spent, spend_over
from cts.plan.samples import Routes, routes_of
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
    assert sum_interval([7.0], 10) == Interval(70.0, 70.0, 70.0)  # one draw: no spread to go by (marked by the job)


def test_work_shared_between_jobs_is_forecast_on_the_sweep_totals() -> None:
    """Job a pays the orig arm of even instances, job b of odd ones: each job varies, their sum does not."""
    a = JobSlice("a", 50, 5, tuple(cost(f"q{i}", 10 if i % 2 == 0 else 4) for i in range(5)), concurrency={"e": 32})
    b = JobSlice("b", 50, 5, tuple(cost(f"q{i}", 4 if i % 2 == 0 else 10) for i in range(5)), concurrency={"e": 32})
    job, sweep = forecast_job(a), forecast_sweep([a, b])
    assert job.calls.high > job.calls.expected > job.calls.low
    assert sweep.calls == Interval(14 * 45, 14 * 45, 14 * 45) and sweep.n_paid == 90 and not sweep.incomplete


def test_a_job_without_slice_records_is_unknown_with_why_and_the_sweep_is_incomplete() -> None:
    """The issue's $0.0000 rows: a slice stopped by the spend limit before 8 of 9 jobs recorded a run."""
    stopped = (
        "the spend limit (services.llm.spend.max_usd) stopped the calibration slice before this job recorded a run"
    )
    known = JobSlice("k=1", 40, 5, tuple(cost(f"q{i}", 6, usd=0.01) for i in range(5)))
    lone = JobSlice("k=2", 40, 1, (cost("q0", 5, usd=0.02),), cut="the spend limit ... at 1 of 5 runs of k=2")
    unknown = [JobSlice(f"k={i}", 40, 0, (), missing=stopped) for i in (3, 4)]
    jobs = [forecast_job(j) for j in (known, lone, *unknown)]
    sweep = forecast_sweep([known, lone, *unknown])
    assert [j.unknown for j in jobs] == ["", "", stopped, stopped]
    assert jobs[1].no_interval == "1 run in the slice" and jobs[1].notes == (
        "the spend limit ... at 1 of 5 runs of k=2",
    )
    assert sweep.incomplete == ("k=3", "k=4") and sweep.no_interval.startswith("k=2")
    assert sweep.usd.expected == pytest.approx(35 * 0.01 + 39 * 0.02)  # the known jobs' part only
    table = forecast_markdown(jobs, sweep, 0.95)
    rows = {r.split("|")[1].strip(): r for r in table.splitlines() if r.startswith("| k=") or r.startswith("| **")}
    assert "$0.0000" not in table
    cells = [c.strip() for c in rows["k=3"].split("|")[4:10]]  # calls .. wall_s: no number where none is known
    assert cells == ["unknown"] * 5 + [""] and stopped in rows["k=3"]  # and why (the wall time is the sweep's)
    assert "| 195 [no interval] |" in rows["k=2"] and "1 of 5 runs" in rows["k=2"]
    assert "| >= $1.1300 [" in rows["**sweep**"] and "incomplete: 2 job(s) unknown (k=3, k=4)" in rows["**sweep**"]
    csv_rows = [line.split(",") for line in forecast_csv(jobs, sweep).splitlines()]
    assert all(r[4:7] == ["", "", ""] for r in csv_rows if r[0] == "k=3")
    assert "| usd | >= $1.1300" in comparison_markdown(sweep, {"usd": 2.0}) and "| n/a |" in comparison_markdown(
        sweep, {"usd": 2.0}
    )
    nothing = forecast_sweep(unknown)
    assert nothing.unknown and "| unknown |" in forecast_markdown([], nothing, 0.95)


def test_a_slice_cut_by_the_spend_limit_names_the_jobs_it_did_not_reach(tmp_path: Path) -> None:
    source, sweep = tmp_path / "slice", tmp_path / "sweep"
    write_records(source / "a", [{"id": "q0", "usage": usage(3, 0.01)}, {"id": "q1", "usage": usage(3, 0.01)}])
    for name, stop in (("a", "spend_limit"), ("b", "spend_limit"), ("c", "done")):
        (source / name).mkdir(parents=True, exist_ok=True)
        (source / name / "summary.json").write_text(json.dumps({"stop_reason": stop}))
    (source / "d").mkdir()  # a job that died before its summary
    jobs = [JobPlan(n, tuple(f"q{i}" for i in range(10)), Routes({}, {"e": 4}, {}), 8, sweep / n) for n in "abcde"]
    a, b, c, d, e = slices_from(source, jobs, per_job=5)
    assert a.cut == "the spend limit (services.llm.spend.max_usd) stopped the calibration slice at 2 of 5 runs of a"
    assert not a.unknown and b.unknown.startswith("the spend limit (services.llm.spend.max_usd) stopped")
    assert c.unknown == f"its job in the calibration slice recorded no run (see {source / 'c' / 'run.log'})"
    assert d.unknown.startswith("its job in the calibration slice recorded no run")
    assert e.unknown == f"no record of this job in {source}"


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
    jobs = [forecast_job(free), forecast_job(paid)]
    sweep = forecast_sweep([free, paid])
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
    assert plan_settings(composed("plan.enabled=true", "plan.then=stop")).only
    assert value_problems(composed("plan=true")) == []
    problems = value_problems(
        composed(
            "plan.calibration_n=0", "plan.confidence=1.5", "services.llm.spend.allow_over_forecast=2", "plan.then=maybe"
        )
    )
    assert sorted(p.split(":")[0] for p in problems) == [
        "plan.calibration_n",
        "plan.confidence",
        "plan.then",
        "services.llm.spend.allow_over_forecast",
    ]


def test_planning_does_not_change_what_a_job_measures() -> None:
    from cts.compose.job_config import protocol_fingerprint

    assert protocol_fingerprint(composed("plan=true")) == protocol_fingerprint(composed())
    assert protocol_fingerprint(composed("plan.enabled=true", "plan.then=stop")) == protocol_fingerprint(composed())


def test_the_calibration_is_the_same_command_on_a_few_instances_in_its_own_dir(tmp_path: Path) -> None:
    argv = [
        "--config-dir",
        "x",
        "-m",
        "clarifier=a,b",
        "limit=50",
        "min_scored=0.9",
        "plan.enabled=true",
        "plan.then=stop",
        "plan.calibration_n=3",
        f"hydra.sweep.dir={tmp_path}/s",
        "tracking.experiment=e",
        "services.llm.batch.roles=[ua,judge]",
    ]
    command = calibration_command(argv, 3, tmp_path / "s.plan" / "calibration", "e")
    assert command[2:] == [
        "--config-dir",
        "x",
        "-m",
        "clarifier=a,b",
        "limit=3",
        "++services.llm.batch.roles=[]",  # the slice runs live: a batch may take its whole window
        "plan.calibration=true",
        "sweep_report=false",
        "min_scored=null",  # the slice forecasts; the sweep answers for its scores
        f"hydra.sweep.dir={tmp_path}/s.plan/calibration",
        "tracking.experiment=e.plan",
    ]


def test_an_earlier_run_stands_in_for_the_slice(tmp_path: Path) -> None:
    """plan.source: its records are the samples, its instances are free (cached)."""
    source, sweep = tmp_path / "earlier", tmp_path / "sweep"
    usage_row = {
        "clarifier": {"calls": 1, "requests": 1, "tokens_in": 100, "tokens_out": 10, "cost_usd": 0.01, "latency_s": 0.2}
    }
    write_records(source / "clarifier=a", [{"id": f"q{i}", "usage": usage_row, "elapsed_s": 1.0} for i in range(5)])
    write_records(sweep / "clarifier=a", [{"id": "q7", "usage": {}}])
    job = JobPlan("clarifier=a", tuple(f"q{i}" for i in range(20)), Routes({}, {"e": 4}, {}), 8, sweep / "clarifier=a")
    (slice_,) = slices_from(source, [job])
    assert slice_.n_free == 6 and slice_.remaining == 14 and len(slice_.samples) == 5  # q0-q4 cached, q7 recorded
    assert not slice_.cut and not slice_.unknown  # an earlier run's size is not a slice's
    assert forecast_job(slice_).usd == Interval(0.14, 0.14, 0.14)


def test_an_earlier_run_that_batched_a_role_is_no_live_sample(tmp_path: Path) -> None:
    """Its batched calls booked batch prices and no request: the job is unknown, with why, never $0 and 0 calls."""
    source, sweep = tmp_path / "earlier", tmp_path / "sweep"
    live = {"calls": 1, "requests": 1, "tokens_in": 100, "tokens_out": 10, "cost_usd": 0.01}
    batched = {"calls": 1, "requests": 0, "tokens_in": 900, "tokens_out": 90, "cost_usd": 0.005}
    hit = {"calls": 1, "cache_hits": 1, "requests": 0}
    rows = {"judged": {"clarifier": live, "judge": batched}, "hits": {"clarifier": live, "judge": hit}}
    jobs = []
    for name, row in rows.items():
        write_records(source / name, [{"id": f"q{i}", "usage": row, "elapsed_s": 1.0} for i in range(5)])
        (source / name / "config.yaml").write_text("services:\n  llm:\n    batch:\n      roles:\n      - judge\n")
        jobs.append(JobPlan(name, tuple(f"q{i}" for i in range(20)), Routes({}, {"e": 4}, {}), 8, sweep / name))
    judged, hits = slices_from(source, jobs)
    assert judged.samples == () and judged.unknown.startswith(f"{source / 'judged'} sent judge through a Batch API")
    assert forecast_job(judged).unknown == judged.unknown and forecast_sweep([judged, hits]).incomplete == ("judged",)
    assert len(hits.samples) == 5 and not hits.unknown  # its batched role only hit the cache: nothing batch-priced
    (source / "judged" / "config.yaml").unlink()  # an older job dir without one: taken as live, as before
    (judged,) = slices_from(source, jobs[:1])
    assert len(judged.samples) == 5


def write_records(job_dir: Path, rows: list[dict]) -> None:
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "records.jsonl").write_text("".join(json.dumps({"k": 1, **r}) + "\n" for r in rows))


def usage(calls: int, usd: float = 0.0) -> dict:
    return {"clarifier": {"calls": calls, "requests": calls, "tokens_in": 100 * calls, "cost_usd": usd}}


@pytest.mark.parametrize("repeats", [1, 2, 3])
def test_each_repeat_is_a_run_the_forecast_counts(tmp_path: Path, repeats: int) -> None:
    """20 instances x R repeats; the slice ran 2 instances x R (a repeat's record carries ``repeat``, 0 left out)."""
    source, sweep = tmp_path / "slice", tmp_path / "sweep"
    rows = [
        {"id": f"q{i}", **({"repeat": r} if r else {}), "usage": usage(3)} for i in range(2) for r in range(repeats)
    ]
    write_records(source / "j", rows)
    write_records(sweep / "j", [{"id": "q9", "usage": usage(3)}])  # an earlier run's repeat 0 of q9
    job = JobPlan("j", tuple(f"q{i}" for i in range(20)), Routes({}, {"e": 4}, {}), 8, sweep / "j", repeats)
    (slice_,) = slices_from(source, [job], per_job=2)
    assert (slice_.n_total, slice_.n_free, len(slice_.samples)) == (20 * repeats, 2 * repeats + 1, 2 * repeats)
    assert not slice_.cut
    forecast = forecast_job(slice_)
    assert forecast.n_paid == 18 * repeats - 1 and forecast.calls.expected == 3 * (18 * repeats - 1)


def test_the_spend_limit_counts_what_the_calibration_slice_spent(tmp_path: Path) -> None:
    """A $0.006 forecast high end fits a $0.01 cap alone; with the slice's $0.005 it does not."""
    sweep = tmp_path / "sweep"
    jobs = [JobPlan(n, ("q0", "q1"), Routes({}, {}, {}), 8, sweep / n) for n in ("a", "b")]
    calibration = tmp_path / "sweep.plan" / "calibration"
    write_records(calibration / "a", [{"id": "q0", "usage": usage(2, 0.002)}])  # a fresh call booked in the slice
    write_records(calibration / "b", [{"id": "q0", "usage": usage(2, 0.002)}])
    (calibration / "b" / "spend.jsonl").write_text('{"unrecorded_usd": 0.001}\n')  # paid, no record (its ledger)
    write_records(sweep / "a", [{"id": "q0", "usage": usage(0, 0.0)}])  # the main run's cache hit: $0
    assert slice_spent(sweep, jobs, None) == pytest.approx(0.005)
    assert slice_spent(sweep, jobs, str(calibration)) == pytest.approx(0.005)  # its own slice, read again
    assert slice_spent(sweep, jobs, str(tmp_path / "elsewhere")) == 0.0  # an earlier run sent nothing for it
    forecast = replace(
        forecast_job(JobSlice("sweep", 4, 2, (cost("q0", 1), cost("q1", 1)))), usd=Interval(0.003, 0.003, 0.006)
    )
    cap = {"max_usd": 0.01}
    assert spend_over(cap, forecast, 0.0, 0.0) is None  # the forecast alone is within the cap
    assert spend_over(cap, forecast, 0.0, 0.005) == (
        "forecast high end $0.0060 + $0.0050 spent by the calibration slice = $0.0110 exceeds "
        "services.llm.spend.max_usd $0.0100 by $0.0010"
    )
    over = spend_over(cap, forecast, 0.003, 0.005)
    assert over is not None and over.endswith(
        "+ $0.0030 spent in the job dirs before = $0.0140 exceeds services.llm.spend.max_usd $0.0100 by $0.0040"
    )
    incomplete = replace(forecast, incomplete=("k=2",))
    assert spend_over(cap, incomplete, 0.0, 0.0) == (
        "the forecast is incomplete (1 job(s) unknown: k=2): it cannot show the sweep stays within "
        "services.llm.spend.max_usd $0.0100"
    )
    assert spend_over({"max_usd": None}, incomplete, 0.0, 0.0) is None
