"""Which repeat a call belongs to: the repeat index in the cache keys, and the repeat's temperature.

A repeated instance must not be served the first run's responses: the repeat index
goes into the key of every LLM response (:class:`cts.llm.LLMRuntime`) and tool result
(:class:`cts.search.toolcache.ToolCache`) computed inside a :func:`sample_scope`.
Repeat 0 adds nothing, so its keys are exactly those of a job without repeats and
existing caches still serve it. The pipeline opens a scope per stage call, so a job
that re-samples one stage salts that stage's keys only (variance by stage).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sample:
    """The sample a call belongs to."""

    repeat: int = 0
    temperature: float | None = None
    """Sampling temperature of every LLM call in the scope (None: each model's own, from the registry)."""


_SAMPLE: ContextVar[Sample] = ContextVar("cts_sample", default=Sample())  # noqa: B039 - Sample is frozen


@contextlib.contextmanager
def sample_scope(repeat: int, temperature: float | None = None) -> Iterator[Sample]:
    """Calls inside (and in tasks started inside) belong to ``repeat``.

    Args:
        repeat: The repeat index (0 = the first run: today's cache keys).
        temperature: Sampling temperature for repeats > 0 (ignored at repeat 0, which
            keeps each model's registry temperature and so its cache keys).
    """
    sample = Sample(repeat, temperature if repeat > 0 else None)
    token = _SAMPLE.set(sample)
    try:
        yield sample
    finally:
        _SAMPLE.reset(token)


def current_sample() -> Sample:
    """The sample of the running call (repeat 0 outside any scope)."""
    return _SAMPLE.get()


def salted(key: Mapping[str, Any]) -> dict[str, Any]:
    """A cache-key object with the current repeat index (``key`` unchanged at repeat 0)."""
    repeat = _SAMPLE.get().repeat
    return dict(key) if repeat == 0 else {**key, "repeat": repeat}


def sampled_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Sampling params with the scope's temperature, when it sets one (before the provider's rules apply)."""
    temperature = _SAMPLE.get().temperature
    return dict(params) if temperature is None else {**params, "temperature": temperature}
