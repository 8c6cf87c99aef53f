"""Pytest fixture: a scripted OpenAI-compatible LLM server on 127.0.0.1.

The server class lives in ``tests/llm_fakes.py`` (the benchmark uses it too);
read its module docstring for the full API. In short::

    from tests.llm_server import Reply
    from tests.llm_server import llm_server_fixture  # noqa: F401  (registers the `llm_server` fixture)

    def test_x(llm_server):
        llm_server.script('["Which year?"]', Reply.error(429, retry_after=0))
        llm_server.handler = lambda body: "unknown"  # used once the queue is empty
        ...  # call a model at llm_server.base_url (ends in /v1)
        assert llm_server.requests[0].body["messages"][0]["role"] == "system"

To route every LLM role of a composed config to it, override
``services.llm.api_base=<llm_server.base_url>`` (see :func:`llm_settings`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.llm_fakes import Recorded, Reply, ScriptedServer

__all__ = ["Recorded", "Reply", "ScriptedServer", "llm_server", "llm_server_fixture", "llm_settings"]


@pytest.fixture(name="llm_server")
def llm_server_fixture() -> Iterator[ScriptedServer]:
    """The ``llm_server`` fixture: a started :class:`ScriptedServer`, stopped after the test."""
    with ScriptedServer() as server:
        yield server


llm_server = llm_server_fixture  # the same fixture under its own name (``from llm_server import llm_server``)


def llm_settings(server: ScriptedServer, cache_dir: Path | None = None, **overrides: Any) -> dict[str, Any]:
    """``services.llm`` settings for fast tests against ``server``.

    Routes every model to the server, uses tiny backoffs and a short timeout,
    and turns the cache off unless ``cache_dir`` is given. ``overrides`` replace
    top-level keys (e.g. ``max_attempts=2``, ``spend={"max_usd": 0.01}``).
    """
    settings: dict[str, Any] = {
        "api_base": server.base_url,
        "api_key": None,
        "cache": {"mode": "off" if cache_dir is None else "read_write", "path": None},
        "concurrency_per_endpoint": 16,
        "timeout_s": 5.0,
        "max_attempts": 3,
        "backoff": {"initial": 0.01, "max": 0.05, "jitter": 0.01, "max_retry_after": 5.0},
        "max_reasks": 2,
        "spend": {"max_usd": None},
        "tracing": False,
    }
    settings.update(overrides)
    return settings
