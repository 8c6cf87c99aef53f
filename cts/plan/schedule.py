"""The wall-time model of a sweep on the cts launcher: its schedule, simulated event by event.

What one process does in a multirun (``hydra/launcher=cts``), as :mod:`cts.plan.clock` measures it
on the calibration slice:

- the jobs take turns (one lock) for their set-up and their end; a job's runs start during its
  set-up, at most ``job_concurrency`` at a time;
- a run is a chain of ``steps`` round trips; each step first needs CPU on the event loop, then
  sends its requests (a run has ``requests`` of its own over its steps; a step without one waits a
  round trip for the work another job's run shares with it, the orig arm, a question asked twice), which wait for one of the endpoint's ``capacity`` slots (the oldest run
  first, as :func:`cts.llm.priority_scope` orders them) and take ``latency_s`` each; a run whose
  replies are cached needs only the CPU;
- each finished run leaves its trace to a background writer (MLflow's), ``trace_cpu_s`` of CPU;
  when ``flush`` (the slice showed it), a job's set-up and end wait until the writer has drained
  everything queued, then a fixed ``setup_wait_s`` / ``end_wait_s`` (the writer's own timers);
- the event loop, the writer and the job thread holding the turn share ``core`` (the part of one
  core the process gets: the GIL runs one thread at a time, and other processes take the rest)
  equally among those with work.

:func:`simulate` plays that out and returns the wall time from the first set-up to the last end.
Nothing here is a constant of today's speed: every number comes from the slice.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["JobShape", "Machine", "Simulated", "simulate"]


@dataclass(frozen=True)
class JobShape:
    """One job as the schedule sees it.

    Attributes:
        name: The job.
        runs: Runs the main run makes, cached ones included (they still take CPU).
        paid: Of those, runs that send requests.
        requests: Requests of a paid run (mean).
        steps: Round trips on a run's critical path.
        setup_cpu_s: CPU of its set-up (its thread, under the turn).
        end_cpu_s: CPU of its end (summary, tracking).
    """

    name: str
    runs: int
    paid: int
    requests: float
    steps: int
    setup_cpu_s: float
    end_cpu_s: float


@dataclass(frozen=True)
class Machine:
    """What every job shares (see the module docstring)."""

    latency_s: float
    capacity: int
    core: float
    run_cpu_s: float
    trace_cpu_s: float
    setup_wait_s: float = 0.0
    end_wait_s: float = 0.0
    flush: bool = False
    job_concurrency: int = 64
    initial: int = 0
    """The adaptive limiter's first limit (``services.llm.adaptive.initial``), doubled every round trip
    up to ``capacity`` (its slow start); 0: ``capacity`` from the first request."""


@dataclass(frozen=True)
class Simulated:
    """The simulated schedule: its wall time, its request phase and the most requests in flight."""

    wall_s: float
    requests_s: float
    peak_in_flight: int


@dataclass
class _Run:
    job: int
    requests: list[int]  # per step still to come: its own requests (0: it waits for work another run shares)
    wait_s: float  # a step without a request of its own: the round trip it waits for (0 for a cached run)
    step_cpu: float
    waiting: int = 0  # requests of the current step not yet answered
    priority: int = 0  # when it started: the endpoint serves the oldest run first


@dataclass
class _Burst:
    run: _Run
    cpu: float  # CPU seconds left


@dataclass
class _Phase:
    job: int
    kind: str  # "setup" or "end"
    cpu: float
    stage: int = 0  # 0: first CPU part, 1: flush, 2: timer, 3: second CPU part (set-up only)


class _Sim:
    def __init__(self, jobs: Sequence[JobShape], m: Machine) -> None:
        self.jobs, self.m = jobs, m
        self.t = 0.0
        self.order = itertools.count()
        self.events: list[tuple[float, int, str, object]] = []
        self.loop: deque[_Burst] = deque()
        self.limit = min(m.capacity, m.initial) if m.initial > 0 else m.capacity
        self.slots_free = self.limit
        self.queue: list[tuple[int, int, _Run]] = []  # heap: (run's priority, arrival, run)
        self.backlog = 0.0
        self.turn: deque[_Phase] = deque(_Phase(i, "setup", j.setup_cpu_s / 2) for i, j in enumerate(jobs))
        self.holder: _Phase | None = None
        self.pending = [deque(self._runs(i, j)) for i, j in enumerate(jobs)]
        self.active = [0] * len(jobs)
        self.ended = 0
        self.first_request = self.last_reply = -1.0
        self.peak = 0

    def _runs(self, i: int, job: JobShape) -> list[_Run]:
        """The job's runs: paid ones send ``requests`` over ``steps`` round trips (the mean kept over the runs)."""
        steps = max(1, job.steps)
        cpu = self.m.run_cpu_s / steps
        runs = []
        for n in range(job.runs):
            paid = n < job.paid
            own = round(job.requests * (n + 1)) - round(job.requests * n) if paid else 0
            per_step = [own // steps + (1 if s < own % steps else 0) for s in range(steps)]
            runs.append(_Run(i, per_step, self.m.latency_s if paid else 0.0, cpu))
        return runs

    def shares(self) -> tuple[float, float, float]:
        """CPU speed of the loop, the writer and the turn's holder (PS among those with work)."""
        loop, writer = bool(self.loop), self.backlog > 1e-12
        job = self.holder is not None and self.holder.stage in (0, 3)
        n = loop + writer + job
        speed = self.m.core / n if n else 0.0
        return (speed if loop else 0.0, speed if writer else 0.0, speed if job else 0.0)

    def next_cpu_event(self) -> float:
        loop, writer, job = self.shares()
        ends = [math.inf]
        if loop:
            ends.append(self.loop[0].cpu / loop)
        if writer:
            ends.append(self.backlog / writer)
        if job and self.holder is not None:
            ends.append(self.holder.cpu / job)
        return self.t + min(ends)

    def advance(self, until: float) -> None:
        dt = until - self.t
        loop, writer, job = self.shares()
        if self.loop and loop:
            self.loop[0].cpu -= dt * loop
        self.backlog = max(0.0, self.backlog - dt * writer)
        if self.holder is not None and job:
            self.holder.cpu -= dt * job
        self.t = until

    def run(self) -> Simulated:
        self.take_turn()
        while self.ended < len(self.jobs):
            t_cpu = self.next_cpu_event()
            t_evt = self.events[0][0] if self.events else math.inf
            if math.isinf(t_cpu) and math.isinf(t_evt):
                raise RuntimeError("the schedule is stuck")  # a bug in the model, not a sweep's fault
            if t_evt <= t_cpu:
                self.advance(t_evt)
                _, _, kind, what = heapq.heappop(self.events)
                self.on_event(kind, what)
            else:
                self.advance(t_cpu)
                self.on_cpu()
        phase = (self.last_reply - self.first_request) if self.first_request >= 0 else 0.0
        return Simulated(self.t, phase, self.peak)

    # --- CPU completions
    def on_cpu(self) -> None:
        eps = 1e-9
        if self.loop and self.loop[0].cpu <= eps:
            self.after_cpu(self.loop.popleft().run)
        if self.holder is not None and self.holder.stage in (0, 3) and self.holder.cpu <= eps:
            self.phase_step()
        if self.backlog <= eps and self.holder is not None and self.holder.stage == 1:
            self.phase_step()

    def after_cpu(self, run: _Run) -> None:
        mine = run.requests[0]
        if mine == 0:  # a cached step goes on at once; one another run's request answers takes its round trip
            if run.wait_s > 0:
                self.push(self.t + run.wait_s, "shared", run)
            else:
                self.step_done(run)
            return
        run.waiting = mine
        for _ in range(mine):
            heapq.heappush(self.queue, (run.priority, next(self.order), run))
        self.dispatch()

    def dispatch(self) -> None:
        while self.slots_free and self.queue:
            run = heapq.heappop(self.queue)[2]
            self.slots_free -= 1
            if self.first_request < 0:
                self.first_request = self.t
                if self.limit < self.m.capacity:  # the slow start: the limit doubles every round trip
                    self.push(self.t + self.m.latency_s, "grow", None)
            self.peak = max(self.peak, self.limit - self.slots_free)
            self.push(self.t + self.m.latency_s, "reply", run)

    def step_done(self, run: _Run) -> None:
        run.requests.pop(0)
        if run.requests:
            self.loop.append(_Burst(run, run.step_cpu))
            return
        self.backlog += self.m.trace_cpu_s
        self.active[run.job] -= 1
        self.admit(run.job)
        if not self.active[run.job] and not self.pending[run.job]:
            self.turn.append(_Phase(run.job, "end", self.jobs[run.job].end_cpu_s))
            self.take_turn()

    def admit(self, job: int) -> None:
        while self.pending[job] and self.active[job] < self.m.job_concurrency:
            run = self.pending[job].popleft()
            run.priority = next(self.order)
            self.active[job] += 1
            self.loop.append(_Burst(run, run.step_cpu))

    # --- timed events
    def push(self, at: float, kind: str, what: object) -> None:
        heapq.heappush(self.events, (at, next(self.order), kind, what))

    def on_event(self, kind: str, what: object) -> None:
        if kind == "reply":
            self.slots_free += 1
            self.last_reply = self.t
            run = what
            assert isinstance(run, _Run)
            run.waiting -= 1
            if run.waiting == 0:
                self.step_done(run)
            self.dispatch()
        elif kind == "grow":
            grown = min(self.m.capacity, self.limit * 2)
            self.slots_free += grown - self.limit
            self.limit = grown
            if grown < self.m.capacity:
                self.push(self.t + self.m.latency_s, "grow", None)
            self.dispatch()
        elif kind == "shared":
            assert isinstance(what, _Run)
            self.step_done(what)
        elif kind == "timer":
            self.phase_step()

    # --- the turn: set-ups and ends, one at a time
    def take_turn(self) -> None:
        if self.holder is None and self.turn:
            self.holder = self.turn.popleft()
            if self.holder.cpu <= 0:
                self.phase_step()

    def phase_step(self) -> None:
        """The holder's phase moves on: CPU, then (flush) the writer drained, then its timer."""
        ph = self.holder
        assert ph is not None
        job = self.jobs[ph.job]
        if ph.stage == 0:
            if ph.kind == "setup":
                self.admit(ph.job)
                if not self.pending[ph.job] and not self.active[ph.job]:  # a job with no run
                    self.turn.append(_Phase(ph.job, "end", job.end_cpu_s))
            ph.stage = 1
            if not self.m.flush or self.backlog <= 1e-12:
                self.phase_step()
        elif ph.stage == 1:
            ph.stage = 2
            self.push(self.t + (self.m.setup_wait_s if ph.kind == "setup" else self.m.end_wait_s), "timer", None)
        elif ph.stage == 2 and ph.kind == "setup":
            ph.stage, ph.cpu = 3, job.setup_cpu_s / 2
            if ph.cpu <= 0:
                self.phase_step()
        else:
            self.ended += ph.kind == "end"
            self.holder = None
            self.take_turn()


def simulate(jobs: Sequence[JobShape], machine: Machine) -> Simulated:
    """The schedule of ``jobs`` on ``machine`` (see the module docstring)."""
    if not jobs:
        return Simulated(0.0, 0.0, 0)
    return _Sim(jobs, machine).run()
