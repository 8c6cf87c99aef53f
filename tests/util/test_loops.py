"""The jobs' event loop: uvloop's where installed, asyncio's when CTS_EVENT_LOOP=asyncio."""

from __future__ import annotations

import asyncio

import pytest

from cts._util.loops import LOOP_ENV, loop_kind, new_event_loop, run
from cts.sweep import SweepSession

uvloop = pytest.importorskip("uvloop")


async def _loop_type() -> type:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop())


def test_jobs_run_on_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LOOP_ENV, raising=False)
    assert loop_kind() == "uvloop"
    assert issubclass(run(_loop_type()), uvloop.Loop)
    with SweepSession(progress=False) as session:
        assert isinstance(session.loop, uvloop.Loop)
        assert issubclass(session.run(_loop_type()), uvloop.Loop)


def test_the_environment_can_keep_asyncio_s_own_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOOP_ENV, "asyncio")
    assert loop_kind() == "asyncio"
    assert not issubclass(run(_loop_type()), uvloop.Loop)
    loop = new_event_loop()
    try:
        assert not isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
