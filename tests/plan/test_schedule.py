"""The wall-time model: the simulated schedule's bounds, what it reads off a slice, and the thread clock."""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cts.plan.clock import ThreadClock, Timeline, timeline_from_json
from cts.plan.forecast import InstanceCost, Interval, JobSlice
from cts.plan.schedule import JobShape, Machine, simulate
from cts.plan.walltime import forecast_wall, measure

FAST = Machine(latency_s=0.5, capacity=32, core=1.0, run_cpu_s=0.0, trace_cpu_s=0.0)


def jobs(n_jobs: int, runs: int, requests: float = 4, steps: int = 4, **kw: float) -> list[JobShape]:
    return [
        JobShape(f"j{i}", runs, runs, requests, steps, kw.get("setup", 0.0), kw.get("end", 0.0)) for i in range(n_jobs)
    ]


def test_a_sweep_bound_by_the_endpoint_takes_its_requests_times_latency_over_capacity() -> None:
    wall = simulate(jobs(4, 100), FAST).wall_s  # 1600 requests, 32 at a time, 0.5 s each
    assert 1600 * 0.5 / 32 <= wall <= 1600 * 0.5 / 32 + 4 * 0.5 + 0.01


def test_a_few_runs_take_their_critical_path() -> None:
    assert simulate(jobs(1, 3, requests=6, steps=6), FAST).wall_s == pytest.approx(6 * 0.5)


def test_a_sweep_bound_by_the_cpu_takes_its_cpu_over_the_core_share() -> None:
    busy = Machine(0.5, 64, core=0.5, run_cpu_s=0.1, trace_cpu_s=0.0)
    wall = simulate(jobs(2, 100), busy).wall_s  # 20 s of loop CPU at half a core
    assert 40.0 <= wall <= 41.0


def test_the_oldest_run_is_served_first_so_the_first_job_ends_first() -> None:
    from cts.plan.schedule import _Sim

    sim = _Sim(jobs(3, 64, requests=8, steps=8), Machine(0.5, 16, 1.0, 0.0, 0.0))
    ended: list[int] = []
    step = sim.phase_step

    def record() -> None:
        if sim.holder is not None and sim.holder.kind == "end" and sim.holder.stage == 2:
            ended.append(sim.holder.job)
        step()

    sim.phase_step = record  # type: ignore[method-assign]
    sim.run()
    assert ended == [0, 1, 2]


def test_turns_with_a_flush_wait_for_the_writer_and_their_own_timer() -> None:
    flush = Machine(0.5, 32, 1.0, run_cpu_s=0.0, trace_cpu_s=0.1, end_wait_s=2.0, flush=True)
    wall = simulate(jobs(3, 10, requests=1, steps=1, end=0.1), flush).wall_s
    # the runs (0.5 s), then 3 ends one after another: 0.1 s CPU + 2 s each; the writer drains 3 s first
    assert 3 * 10 * 0.1 + 3 * 2.0 <= wall <= 0.5 + 3 * 10 * 0.1 + 3 * (2.0 + 0.1) + 0.01
    no_flush = simulate(jobs(3, 10, requests=1, steps=1, end=0.1), Machine(0.5, 32, 1.0, 0.0, 0.1, end_wait_s=2.0))
    assert no_flush.wall_s < wall


def _timeline(tmp_path: Path, **extra: float) -> Path:
    """A slice of 2 jobs x 4 runs as the thread clock writes it: job 0 sets up, then job 1; ends 2 s apart."""
    threads = [
        {"name": "cts-job-0", "cpu_s": 0.5, "busy": [[0.1, 0.5, 0.4], [6.0, 6.2, 0.1]]},
        {"name": "cts-job-1", "cpu_s": 0.3, "busy": [[0.5, 0.8, 0.2], [8.0, 8.2, 0.1]]},
        {"name": "cts-sweep-loop", "cpu_s": 0.8, "busy": [[0.2, 5.0, 0.8]]},
        {"name": "MlflowTraceLoggingWorker_0", "cpu_s": 0.4, "busy": [[1.0, 6.0, 0.4]]},
        {"name": "MainThread", "cpu_s": 0.1, "busy": [[0.0, 0.1, 0.1]]},
    ]
    samples = [[t, 0.9 * t, 0.9 * t, 12] for t in range(0, 11)]  # 0.9 of a core; the machine otherwise idle
    data = {"wall_s": 10.0, "cpu_s": 2.1, "epoch": 0.0, "cores": 2, "threads": threads, "samples": samples, **extra}
    (tmp_path / "sweep_actual.json").write_text(json.dumps({"calls": 16, "timeline": data}))
    return tmp_path


def _slice(name: str, elapsed: float) -> JobSlice:
    samples = tuple(InstanceCost(f"q{i}", {"calls": 2.0}, {"e": 2.0}, (0.5, 0.5), elapsed) for i in range(4))
    return JobSlice(name, 4, 0, samples, concurrency={"e": 64})


def test_measure_reads_the_schedule_off_the_slice_s_timeline(tmp_path: Path) -> None:
    measured = measure(_timeline(tmp_path), [_slice("a", 2.1), _slice("b", 1.0)], 64, 64)
    m = measured.machine
    assert m.latency_s == pytest.approx(0.5) and m.run_cpu_s == pytest.approx(0.8 / 8)
    assert m.trace_cpu_s == pytest.approx(0.4 / 8) and m.flush and m.end_wait_s == pytest.approx(2.0 - 0.1 / 1.0)
    assert measured.setup_cpu_s == (0.4, 0.2) and measured.end_cpu_s == (0.1, 0.1) and measured.steps == (4, 2)
    assert measured.core == (1.0, 1.0, 1.0)  # 0.9 of a core used and a core idle: a whole core to have
    assert measured.slice_model_s > 0 and not measured.note
    assert measure(tmp_path / "nowhere", [_slice("a", 1.0)], 64, 64).note == "the slice recorded no timeline"


def test_measure_times_set_ups_and_ends_by_the_turns_the_jobs_held_when_the_timeline_has_them(tmp_path: Path) -> None:
    # The same slice, with each job thread's two turns as the session timed them: set-ups of 0.35 s
    # and 0.2 s of CPU, ends of 0.05 s CPU in 0.25 s (0.2 s of waiting), 2 s apart.
    turns = [
        ["cts-job-0", 0.1, 0.5, 0.35],
        ["cts-job-1", 0.5, 0.75, 0.2],
        ["cts-job-0", 6.0, 6.25, 0.05],
        ["cts-job-1", 8.0, 8.25, 0.05],
        ["cts-sweep-loop", 1.0, 9.0, 5.0],  # not a job's: left out
    ]
    timed = measure(_timeline(tmp_path, turns=turns), [_slice("a", 2.1), _slice("b", 1.0)], 64, 64)
    assert timed.setup_cpu_s == (0.35, 0.2) and timed.end_cpu_s == (0.05, 0.05)
    assert timed.machine.end_wait_s == pytest.approx(0.2)  # its own wall less CPU, not the 2 s between ends
    assert timed.machine.setup_wait_s == pytest.approx(0.05)  # 0.4 - 0.35 and 0.25 - 0.2
    assert timed.lead_s == pytest.approx(0.1)
    sampled = measure(_timeline(tmp_path), [_slice("a", 2.1), _slice("b", 1.0)], 64, 64)
    assert sampled.machine.end_wait_s == pytest.approx(2.0 - 0.1)  # without turns: the spacing of the stretches


def test_the_high_end_assumes_the_limiters_peak_of_requests_in_flight_not_only_the_sampled_one(tmp_path: Path) -> None:
    slices = [_slice("a", 2.1), _slice("b", 1.0)]
    sampled = measure(_timeline(tmp_path), slices, 64, 64)
    assert sampled.capacity_low == 12 and sampled.capacity_best == 64  # samples saw 12; no timeline peak (older runs)
    exact = measure(_timeline(tmp_path, peak_in_flight=40), slices, 64, 64)
    assert exact.capacity_low == 40 and exact.capacity_best == 64  # a peak between samples
    capped = measure(_timeline(tmp_path, peak_in_flight=90), slices, 64, 64)
    assert capped.capacity_low == 64  # never above the ceiling
    main = [JobSlice("a", 400, 4, ()), JobSlice("b", 400, 4, ())]
    walls = [forecast_wall(m, main, [792.0] * 2, Interval(1584, 1584, 1584), 0.0) for m in (sampled, exact)]
    assert walls[1].high < walls[0].high and walls[1].low == pytest.approx(walls[0].low)


def test_the_expected_wall_is_the_midpoint_of_the_capacities_the_slice_leaves_open(tmp_path: Path) -> None:
    # The slice had 12 requests in flight and met no limit: the endpoint may take 12 or 64.
    slices = [_slice("a", 2.1), _slice("b", 1.0)]
    open_ = measure(_timeline(tmp_path), slices, 64, 64)
    main = [JobSlice("a", 400, 4, ()), JobSlice("b", 400, 4, ())]
    no_cpu = replace(
        open_,
        machine=replace(open_.machine, run_cpu_s=0.0, trace_cpu_s=0.0),
        core=(1.0,) * 3,
        slice_model_s=0.0,
        lead_s=0.0,
    )
    calls = Interval(1584, 1584, 1584)
    wall = forecast_wall(no_cpu, main, [792.0] * 2, calls, 0.0)
    assert no_cpu.capacity_low == 12 and no_cpu.capacity_best == 64
    met = {  # a limit met, as a 429's congestion settling at c: all three assume it
        c: replace(no_cpu, machine=replace(no_cpu.machine, capacity=c), capacity_best=c, capacity_low=c)
        for c in (12, 64)
    }
    at = {c: forecast_wall(m, main, [792.0] * 2, calls, 0.0) for c, m in met.items()}
    assert at[12].expected > 2 * at[64].expected  # the endpoint bounds this sweep: its capacity matters
    assert at[12].low == at[12].expected == at[12].high
    assert wall.expected == pytest.approx(math.sqrt(at[12].expected * at[64].expected))
    assert wall.low == pytest.approx(at[64].expected) and wall.high == pytest.approx(at[12].expected)


def test_the_forecast_scales_the_slice_to_the_main_run(tmp_path: Path) -> None:
    measured = measure(_timeline(tmp_path), [_slice("a", 2.1), _slice("b", 1.0)], 64, 64)
    main = [JobSlice("a", 400, 4, ()), JobSlice("b", 400, 4, ())]
    small = forecast_wall(
        measured, [JobSlice("a", 40, 4, ()), JobSlice("b", 40, 4, ())], [72.0] * 2, Interval(144, 144, 144), 0.0
    )
    big = forecast_wall(measured, main, [792.0] * 2, Interval(1400, 1584, 1800), 3.0)
    assert big.low <= big.expected <= big.high and small.expected < big.expected
    # 800 runs of loop and writer CPU (0.1 + 0.05 s each) on one core: the CPU bounds it from below
    assert big.expected >= 800 * 0.15 + 3.0


def test_a_starved_clock_does_not_split_a_thread_that_kept_working() -> None:
    from cts.plan.clock import _Track

    clock = ThreadClock(interval_s=0.05, gap_s=0.2)
    track = _Track("cts-job-7", 0.0)
    # Busy at 0.05 and 0.10, then the clock itself misses 0.3 s of samples while the thread's CPU grows.
    for now, used in [(0.05, 0.04), (0.10, 0.09), (0.40, 0.30), (0.45, 0.35)]:
        clock._advance(track, now, used)
    assert [b[:2] for b in track.busy] == [[0.0, 0.45]] and track.busy[0][2] == pytest.approx(0.35)
    # Samples that see it idle for gap_s do end the stretch; shorter idleness does not.
    for now in (0.50, 0.55, 0.60):
        clock._advance(track, now, 0.35)
    clock._advance(track, 0.65, 0.40)
    assert len(track.busy) == 1
    for now in (0.70, 0.75, 0.80, 0.85, 0.90):
        clock._advance(track, now, 0.40)
    clock._advance(track, 0.95, 0.45)
    assert [round(t, 6) for b in track.busy for t in b[:2]] == [0.0, 0.65, 0.90, 0.95]


def test_the_thread_clock_sees_which_thread_worked_and_when(tmp_path: Path) -> None:
    clock = ThreadClock(interval_s=0.05, gap_s=0.2).start()
    stop, done = time.monotonic() + 0.5, threading.Event()

    def spin() -> None:
        while time.monotonic() < stop:
            pass
        done.wait(5)  # alive (and idle) until the clock stops: its name is known to every sample

    worker = threading.Thread(target=spin, name="cts-job-7")
    worker.start()
    time.sleep(0.8)
    timeline = clock.stop()
    done.set()
    worker.join()
    assert 0.05 <= timeline.cpu_of("cts-job-7") <= timeline.cpu_s + 0.05  # a loaded machine gives it less than 0.5 s
    (span,) = [t for t in timeline.threads if t.name == "cts-job-7"]
    assert len(span.busy) == 1 and span.busy[0][0] < 0.6
    assert timeline.samples and timeline.cores >= 1
    again = timeline_from_json(json.loads(json.dumps(timeline.to_json())))
    assert isinstance(again, Timeline) and again.cpu_of("cts-job-7") == pytest.approx(timeline.cpu_of("cts-job-7"))


def test_the_clock_keeps_the_turns_each_job_held_in_the_session(tmp_path: Path) -> None:
    import asyncio

    from cts._util.launch import Launch
    from cts.sweep import SweepSession

    def spin(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    def job(session: SweepSession) -> None:
        with session.job_turn():
            spin(0.1)  # its set-up
            session.run(asyncio.sleep(0.4))  # its runs: the turn is given up meanwhile
            spin(0.05)  # its end

    with Launch.begin(str(tmp_path)).bound() as launch:
        clock = ThreadClock(launch, interval_s=0.05)
        clock.start()
        with SweepSession(progress=False) as session:
            worker = threading.Thread(target=job, args=(session,), name="cts-job-0")
            worker.start()
            worker.join()
        timeline = clock.stop()  # after the session closed, as a sweep's clock stops after its report
    (setup, end) = timeline.turns
    assert setup[0] == end[0] == "cts-job-0" and setup[2] + 0.35 <= end[1]  # the runs lay between them
    assert 0.1 <= setup[3] < 0.2 and 0.05 <= end[3] < 0.15  # each turn's own CPU
    assert setup[2] - setup[1] >= 0.1 and 0 <= setup[1] < timeline.wall_s
    again = timeline_from_json(json.loads(json.dumps(timeline.to_json())))
    assert again is not None and again.turns == timeline.turns
