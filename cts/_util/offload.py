"""Blocking calls run off an event loop at a small CPU cost per call (the response and tool caches' store).

``asyncio.to_thread`` copies the context, submits a work item to the loop's default pool and
chains two futures, and each reply wakes the loop: 54-85 us of CPU a call, a SQLite look-up
included (``benchmarks/offload_bench.py``). A sweep makes three store trips per request it sends
(the look, the claim, the row stored) and as many for its tools. :class:`Offload` queues
``(loop, future, call)`` to a few worker threads of its own; a worker takes what is queued (up to
``batch`` calls), runs the calls one after another and settles their futures with one wake of each
loop: 24 us a call, the look-up included. Workers start when calls find none waiting and end after
``idle_s`` without work (a thread's store connection closes with it). The workers are daemon threads
(an idle one must not hold the process's exit for ``idle_s``), so at exit the process waits up to
``exit_wait_s`` for the calls already queued, as ``asyncio.to_thread``'s pool did: a reply that
arrived before a SIGTERM is stored, not paid for again on resume.
"""

from __future__ import annotations

import asyncio
import atexit
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Offload"]

_Item = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class Offload:
    """Run blocking calls on up to ``workers`` threads; ``await offload(fn, *args)`` is ``fn(*args)``.

    The calls do not inherit the caller's context variables (``asyncio.to_thread``'s do): use it
    for calls that need none, such as a store's reads and writes.

    Args:
        workers: Most threads at once (calls beyond them queue; a worker runs them in turn).
        name: The threads' name prefix.
        idle_s: A worker with no call for this long ends.
        batch: Most calls a worker takes from the queue before it settles them.
        exit_wait_s: At the process's exit, the longest wait for the calls queued or running.
    """

    def __init__(
        self,
        workers: int = 4,
        name: str = "cts-offload",
        idle_s: float = 2.0,
        batch: int = 16,
        exit_wait_s: float = 30.0,
    ) -> None:
        self.workers = workers
        self.name = name
        self.idle_s = idle_s
        self.batch = batch
        self.exit_wait_s = exit_wait_s
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._pending = 0  # calls queued or running
        self._live = 0  # workers alive
        self._waiting = 0  # of them, those waiting for a call
        self._claimed = 0  # calls queued for a waiting worker, not yet taken (only decides whether to start one)
        self._started = 0

    def __call__(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Queue ``fn(*args)``; the returned future (of the running loop) gets its result or exception."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put((loop, future, fn, args))
        with self._lock:  # a worker only ends with the queue empty under this lock: the call is taken
            self._pending += 1
            if self._waiting > self._claimed:
                self._claimed += 1  # a waiting worker takes it
                return future
            if self._live >= self.workers:
                return future  # a busy worker takes it when it comes back
            self._live += 1
            self._started += 1
            n = self._started
        if n == 1:
            atexit.register(self.drain)
        threading.Thread(target=self._work, name=f"{self.name}_{n}", daemon=True).start()
        return future

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until no call is queued or running (at most ``timeout``, default ``exit_wait_s``); whether none is."""
        with self._done:
            return self._done.wait_for(lambda: self._pending == 0, self.exit_wait_s if timeout is None else timeout)

    @property
    def threads(self) -> int:
        """Workers alive now."""
        with self._lock:
            return self._live

    def _work(self) -> None:
        while True:
            with self._lock:
                self._waiting += 1
            try:
                items = [self._queue.get(timeout=self.idle_s)]
            except queue.Empty:
                with self._lock:
                    self._waiting -= 1
                    if self._queue.empty():
                        self._live -= 1
                        return
                continue
            with self._lock:
                self._waiting -= 1
                self._claimed = max(0, self._claimed - 1)
            while len(items) < self.batch:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._settle(items)
            with self._done:
                self._pending -= len(items)
                if not self._pending:
                    self._done.notify_all()

    @staticmethod
    def _settle(items: list[_Item]) -> None:
        done: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
        for loop, future, fn, args in items:
            try:
                outcome: tuple[bool, Any] = (True, fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task, as to_thread does
                outcome = (False, exc)
            done.setdefault(loop, []).append((future, *outcome))
        for loop, results in done.items():
            try:
                loop.call_soon_threadsafe(_resolve, results)
            except RuntimeError:  # the loop closed: nobody awaits these any more
                pass


def _resolve(results: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in results:
        if future.done():  # its awaiting task was cancelled
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
