"""Small asyncio helpers."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")


async def bounded(jobs: Iterable[Awaitable[T]], limit: int) -> AsyncGenerator[T, None]:
    """Yield the results of ``jobs`` as they finish, with at most ``limit`` running.

    Jobs are started lazily (a million instances are not a million tasks). When
    one raises, the results already finished are yielded first, then the error
    propagates and the running ones are cancelled.
    """
    todo = iter(jobs)
    running: set[asyncio.Future[T]] = set()
    try:
        while True:
            running.update(asyncio.ensure_future(j) for j in itertools.islice(todo, max(1, limit) - len(running)))
            if not running:
                return
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            failed = [e for f in done if (e := f.exception()) is not None]
            for f in done:
                if f.exception() is None:
                    yield f.result()
            if failed:
                raise failed[0]
    finally:
        for f in running:
            f.cancel()
        await asyncio.gather(*running, return_exceptions=True)
