"""The sweep session: one event loop in one thread, shared by every job of a multirun.

Jobs run in their own threads (Hydra's ``run_job`` and the job's tracking run
there) but hand their async part to the session's loop with :func:`start_async`,
so all instances of all jobs share one schedule: one LLM runtime per distinct
``services.llm`` (one cache, one spend limit), one adaptive limiter per endpoint and
one in-flight table across them, and one orig arm per setting and instance.

The session belongs to its launch (:class:`cts._util.launch.Launch`, ``launch.session``): it
joins the launch bound where it is opened (the cts launcher's), or, opened on its own (a test,
a notebook), binds a launch of its own for the block. Job code finds it through the launch.

Hydra keeps the current job's config in process globals (``HydraConfig``), so the synchronous parts of
jobs (set-up, then summary and tracking) take turns under :attr:`SweepSession.turn`; a job gives the turn
up while its instances run. Each hold of the turn is kept in :attr:`SweepSession.holds` (its thread,
start, end and CPU seconds): what the planner's clock reads for a job's set-up and end (:mod:`cts.plan.clock`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import hashlib
import inspect
import json
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from cts._util.launch import Launch, current_launch
from cts._util.loops import new_event_loop
from cts._util.loops import run as run_loop
from cts._util.startup import end_startup_gc
from cts.llm._lite import stop_logging_worker
from cts.llm._singleflight import SingleFlight
from cts.sweep._progress import SweepProgress

if TYPE_CHECKING:
    from cts.core.records import ArmResult
    from cts.llm import LLMRuntime

T = TypeVar("T")
ArmOutcome = tuple["ArmResult", dict[str, Any]]
OrigShare = Callable[[str, Callable[[], Awaitable[ArmOutcome]]], Awaitable[ArmOutcome]]

_DRAIN_TIMEOUT_S = 30.0


class SweepSession:
    """Shared loop, runtimes, limiters and orig arms of one multirun (see the module docstring).

    Args:
        progress: Show the sweep's progress bar.
    """

    def __init__(self, progress: bool = True) -> None:
        self.loop = new_event_loop()
        self.turn = threading.Lock()
        self.holds: list[tuple[str, float, float, float]] = []
        """``(thread name, monotonic start, end, thread CPU s)`` of each time a job thread held the turn."""
        self._thread = threading.Thread(target=self.loop.run_forever, name="cts-sweep-loop", daemon=True)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._runtimes: dict[str, LLMRuntime] = {}
        self._limits: dict[str, Any] = {}
        self._inflight: SingleFlight[Any] = SingleFlight()
        self._orig: dict[str, SingleFlight[ArmOutcome]] = {}
        self._jobs: set[concurrent.futures.Future[Any]] = set()
        self.stopped = False
        self.progress = SweepProgress(self, progress)
        self._setting_up = 0
        self._launch: contextlib.ExitStack | None = None

    def expect_jobs(self, n: int) -> None:
        """``n`` jobs will take turns; once each has set up (or ended), start-up is over (:mod:`cts._util.startup`)."""
        with self._lock:
            self._setting_up = n
        if n <= 0:
            end_startup_gc()

    def _set_up(self) -> None:
        """This job thread's set-up is over (it waits for its instances, or has ended)."""
        if getattr(self._local, "set_up", False):
            return
        self._local.set_up = True
        with self._lock:
            self._setting_up -= 1
            last = self._setting_up == 0
        if last:
            end_startup_gc()

    def __enter__(self) -> SweepSession:
        launch = current_launch()
        if launch is not None and launch.session is not None:
            raise RuntimeError("a sweep session is already open in this launch")
        self._launch = contextlib.ExitStack()
        if launch is None:  # opened on its own: a launch of its own for the block
            launch = self._launch.enter_context(Launch.begin(".").bound())
        launch.session = self
        self._launch.callback(setattr, launch, "session", None)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._launch is not None:
            self._launch.close()
        with contextlib.suppress(concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(_drain(), self.loop).result(_DRAIN_TIMEOUT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(_DRAIN_TIMEOUT_S)
        self.loop.close()
        self.progress.close()
        end_startup_gc()

    @contextlib.contextmanager
    def job_turn(self) -> Iterator[None]:
        """Hold the turn for one job's synchronous parts (released inside :meth:`run`)."""
        self._take_turn()
        try:
            yield
        finally:
            self._set_up()
            if getattr(self._local, "holding", False):
                self._give_turn()

    def _take_turn(self) -> None:
        self.turn.acquire()
        self._local.holding = True
        self._local.held_from = (time.monotonic(), time.thread_time())

    def _give_turn(self) -> None:
        self._local.holding = False
        start, cpu = self._local.held_from
        self.holds.append((threading.current_thread().name, start, time.monotonic(), time.thread_time() - cpu))
        self.turn.release()

    def start(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start a job's coroutine on the shared loop now; the job thread goes on (and keeps its turn).

        Raises:
            KeyboardInterrupt: The sweep was stopped (:meth:`cancel`) before the job started.
        """
        with self._lock:
            if self.stopped:  # Ctrl-C came while this job was still setting up
                _close_unstarted(coro)
                raise KeyboardInterrupt("the sweep was stopped")
            # The job's context (its log file, usage scopes, prompts) follows it onto the loop.
            edges = _Edges()
            fut = asyncio.run_coroutine_threadsafe(_in_context(contextvars.copy_context(), coro, edges), self.loop)
            fut.edges = edges  # type: ignore[attr-defined]  # read back by stop_job (getattr)
            self._jobs.add(fut)
        return fut

    def wait(self, fut: concurrent.futures.Future[T]) -> T:
        """Wait for a started job's coroutine, giving up the turn meanwhile.

        Raises:
            KeyboardInterrupt: The sweep was stopped (:meth:`cancel`).
        """
        holding = getattr(self._local, "holding", False)
        hydra_config = _hydra_config()  # the other jobs set it while this one runs
        self._set_up()
        if holding:
            self._give_turn()
        try:
            return fut.result()
        except concurrent.futures.CancelledError as e:
            raise KeyboardInterrupt("the sweep was stopped") from e
        finally:
            self._jobs.discard(fut)
            if holding:
                self._take_turn()
                _set_hydra_config(hydra_config)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a job's coroutine on the shared loop, giving up the turn while it runs (:meth:`start`, :meth:`wait`)."""
        return self.wait(self.start(coro))

    def stop_job(self, fut: concurrent.futures.Future[Any]) -> None:
        """Stop one started job (its set-up failed) and wait until its coroutine has ended."""
        fut.cancel()  # the concurrent future is cancelled at once; the task on the loop ends later
        edges = getattr(fut, "edges", None)
        if edges is not None and edges.began.is_set():  # a task cancelled before its first step never runs
            edges.ended.wait(_DRAIN_TIMEOUT_S)
        self._jobs.discard(fut)

    def cancel(self) -> None:
        """Stop every running job (Ctrl-C): their instance tasks are cancelled, records kept."""
        with self._lock:
            self.stopped = True
            jobs = list(self._jobs)
        for fut in jobs:
            fut.cancel()

    def llm_runtime(self, settings: Mapping[str, Any], cache_dir: Path) -> LLMRuntime:
        """The runtime for these ``services.llm`` settings, shared by every job that has them.

        Runtimes of different settings still share the endpoint limiters and the in-flight table.
        """
        from cts.llm import LLMRuntime

        key = json.dumps([settings, str(cache_dir)], sort_keys=True, default=str)
        with self._lock:
            if key not in self._runtimes:
                runtime = LLMRuntime.from_settings(settings, cache_dir)
                runtime.share_endpoints(self.loop, self._limits, self._inflight)
                self._runtimes[key] = runtime
            return self._runtimes[key]

    def totals(self) -> tuple[float, float]:
        """Requests sent and USD billed so far, over every runtime of the sweep."""
        requests = cost = 0.0
        for runtime in list(self._runtimes.values()):
            for row in runtime.usage().values():
                requests += row.get("requests", 0.0)
                cost += row.get("cost_usd", 0.0)
        return requests, cost

    def orig_share(self, setting: str) -> OrigShare:
        """Share the orig arm between jobs with the same ``setting`` (see :func:`orig_setting`)."""
        with self._lock:
            flights = self._orig.setdefault(setting, SingleFlight(keep=True))

        async def share(instance_id: str, work: Callable[[], Awaitable[ArmOutcome]]) -> ArmOutcome:
            return (await flights.run(instance_id, work))[0]

        return share

    def orig_counts(self) -> dict[str, int]:
        """Orig arms computed and reused, over every setting."""
        flights = list(self._orig.values())
        return {"orig_computed": sum(f.started for f in flights), "orig_shared": sum(f.joined for f in flights)}


def _hydra_config() -> Any:
    """The job config Hydra's process-global ``HydraConfig`` holds (None when unset)."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.instance().cfg


def _set_hydra_config(cfg: Any) -> None:
    """Give ``HydraConfig`` back to the job that holds the turn (its overrides, dirs, mode)."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().cfg = cfg


class _Edges:
    """When a job's coroutine began and ended on the loop (seen from the job's thread)."""

    def __init__(self) -> None:
        self.began = threading.Event()
        self.ended = threading.Event()


async def _in_context(ctx: contextvars.Context, coro: Coroutine[Any, Any, T], edges: _Edges | None = None) -> T:
    """Await ``coro`` with the context variables of ``ctx`` (the calling job thread's) set."""
    if edges is not None:
        edges.began.set()
    try:
        for var, value in ctx.items():
            var.set(value)
        return await coro
    finally:
        if edges is not None:
            edges.ended.set()


def _close_unstarted(coro: Coroutine[Any, Any, Any]) -> None:
    """Close a coroutine that never ran, and the unstarted ones it was given (``settled(run_instances(...))``).

    Closing only the outer one would drop the inner ones unawaited: a RuntimeWarning on a clean stop."""
    frame = getattr(coro, "cr_frame", None)
    if frame is not None and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
        for value in list(frame.f_locals.values()):
            if inspect.iscoroutine(value):
                _close_unstarted(value)
    coro.close()


async def _drain() -> None:
    """Let cancelled jobs finish their clean-up (close record files) before the loop stops."""
    me = asyncio.current_task()
    await stop_logging_worker()  # litellm's: its task never ends by itself
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    if tasks:
        await asyncio.wait(tasks, timeout=_DRAIN_TIMEOUT_S)
    # As asyncio.run does: async generators still open finish now, among them the one that closes
    # this loop's HTTP sessions (cts.llm._transport), which would otherwise be left to the GC.
    await asyncio.get_running_loop().shutdown_asyncgens()


def current_session() -> SweepSession | None:
    """The open sweep session of this context's launch, if any."""
    launch = current_launch()
    session = launch.session if launch is not None else None
    return session if isinstance(session, SweepSession) else None


class Started(Generic[T]):
    """A job's coroutine handed over by :func:`start_async`: wait with :meth:`result`, or :meth:`cancel` it."""

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro: Coroutine[Any, Any, T] | None = coro
        self._context = contextvars.copy_context()  # e.g. the caller's usage scope, still open now
        self._session = current_session()
        self._fut = self._session.start(coro) if self._session is not None else None

    @property
    def running(self) -> bool:
        """Whether the coroutine already runs (on a sweep's loop) before :meth:`result` is called."""
        return self._fut is not None

    def result(self) -> T:
        """The coroutine's result: waited for on the sweep's loop, else run now in a loop of its own.

        Raises:
            KeyboardInterrupt: The sweep was stopped.
        """
        if self._fut is not None:
            assert self._session is not None
            return self._session.wait(self._fut)
        coro, self._coro = self._coro, None
        if coro is None:
            raise RuntimeError("the job's coroutine was already run or cancelled")
        return self._context.run(run_loop, coro)  # as if it had started when it was handed over

    def cancel(self) -> None:
        """Stop the coroutine (its instance tasks are cancelled) and wait until it has ended."""
        if self._fut is None:
            if self._coro is not None:
                self._coro.close()
                self._coro = None
            return
        assert self._session is not None
        self._session.stop_job(self._fut)


def start_async(coro: Coroutine[Any, Any, T]) -> Started[T]:
    """Start a job's coroutine at once on the sweep's shared loop (in a session); else run it on ``result()``.

    In a sweep, a job's first requests then go out while its thread still sets up tracking.
    """
    return Started(coro)


def shared_llm_runtime(settings: Mapping[str, Any], cache_dir: Path) -> LLMRuntime:
    """The job's LLM runtime: the sweep's shared one in a session, else a fresh one."""
    from cts.llm import LLMRuntime

    session = current_session()
    if session is None:
        return LLMRuntime.from_settings(settings, cache_dir)
    return session.llm_runtime(settings, cache_dir)


def orig_setting(parts: Mapping[str, Any]) -> str:
    """Digest of what the orig arm depends on (dataset and gold, search backend, judge, routing)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def orig_share_for(parts: Mapping[str, Any]) -> OrigShare | None:
    """The sweep's orig-arm share for this setting, or None outside a session."""
    session = current_session()
    return session.orig_share(orig_setting(parts)) if session is not None else None


def sweep_progress() -> SweepProgress | None:
    """The sweep's progress bar, or None outside a session (each job shows its own)."""
    session = current_session()
    return session.progress if session is not None else None
