"""A job's sampling design: how often each instance runs, which stages a repeat re-samples, which arms run.

``repeats=N`` runs each instance N times; repeat ``r`` salts the cache keys of the
stages it re-samples with ``r`` (:mod:`cts.llm.sampling`), so it draws fresh responses
where the stages are stochastic and replays repeat 0's everywhere else. Every stage
re-samples by default; ``repeat_stages=[rewriter]`` re-samples only the rewriter (variance
by stage). ``arms`` adds attribution arms beside orig and clarified (:mod:`cts.protocol.arms`).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from cts.core.stages import BUILT_IN, CLARIFY, added, resampled_roles
from cts.llm.sampling import sample_scope

R = TypeVar("R")  # cts.protocol.pipeline.Roles (which imports this module)

STAGES = resampled_roles()
"""The paper's stages a repeat can re-sample, by role (the question typer follows the clarifier);
:meth:`Design.of` reads :func:`cts.core.stages.resampled_roles` again, so a stage declared later counts."""
ARMS = ("oracle", "withheld", "prefix")
"""Attribution arms: the intent searched, the questions with answers withheld, the answers 1..i."""


def _names(value: Any, allowed: Sequence[str], what: str) -> tuple[str, ...]:
    """A list (or one name, or a comma-separated string) of names from ``allowed``."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    names = tuple(n.strip() for item in items for n in str(item).split(",") if n.strip())
    bad = [n for n in names if n not in allowed]
    if bad:
        raise ValueError(f"{what} must name some of {', '.join(allowed)}; got {', '.join(bad)}")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Design:
    """How a job samples (``repeats``, ``repeat_temperature``, ``repeat_stages``, ``arms`` in the config)."""

    repeats: int = 1
    temperature: float | None = None
    """Temperature of every LLM call a repeat > 0 re-samples (None: each model's registry temperature)."""
    stages: tuple[str, ...] = ()
    """The stages a repeat re-samples (empty: all of them)."""
    arms: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.repeats, int) or self.repeats < 1:
            raise ValueError(f"repeats must be a positive integer, got {self.repeats!r}")
        _names(self.stages, resampled_roles(), "repeat_stages")
        _names(self.arms, ARMS, "arms")

    @classmethod
    def of(cls, repeats: Any = 1, temperature: Any = None, stages: Any = None, arms: Any = None) -> Design:
        """The design of config values (a list, one name or ``a,b`` for stages and arms)."""
        temp = None if temperature is None else float(temperature)
        return cls(int(repeats), temp, _names(stages, resampled_roles(), "repeat_stages"), _names(arms, ARMS, "arms"))

    def repeat_of(self, stage: str, repeat: int) -> int:
        """The repeat index ``stage``'s cache keys carry at ``repeat`` (0 when the stage is replayed)."""
        return repeat if not self.stages or stage in self.stages else 0

    def share_key(self, instance_id: str, repeat: int, arm: str = "orig", query: str = "") -> str:
        """Key of a searched-and-judged arm shared across a sweep's jobs (orig at repeat 0: the instance id).

        The orig and oracle arms are shared by name; the rewritten arms by the query they
        search (two jobs rewriting alike search once). Past repeat 0 the key adds the
        repeat index search and judge sample at (and the temperature they sample with).
        """
        search, judge = self.repeat_of("search", repeat), self.repeat_of("judge", repeat)
        parts = [instance_id]
        if arm != "orig":
            named = arm == "oracle"
            parts.append(arm if named else "q:" + hashlib.sha256(query.encode("utf-8")).hexdigest()[:16])
        if search or judge:
            parts.append(f"r{search}.{judge}" + ("" if self.temperature is None else f"@t{self.temperature}"))
        return "|".join(parts)

    def roles_at(self, roles: R, repeat: int) -> R:
        """``roles`` whose every call runs in its stage's sample scope (``roles`` itself at repeat 0)."""
        if repeat == 0:
            return roles

        def at(stage: str) -> tuple[int, float | None]:
            return self.repeat_of(stage, repeat), self.temperature

        r: Any = roles  # the Roles dataclass, whose module imports this one
        paper = {s.role: _Scoped(getattr(r, s.role), *at(s.role)) for s in BUILT_IN}
        extra = {s.role: _Scoped(r.extra[s.role], *at(s.role)) for s in added() if s.role in r.extra}
        qtyper = _Scoped(r.qtyper, *at(CLARIFY.role))  # the question typer re-samples with the clarifier
        return replace(roles, **paper, qtyper=qtyper, extra=extra)  # type: ignore[type-var]  # R: a dataclass


PLAIN = Design()
"""One run per instance, no attribution arm: a job as it was before repeats."""


class _Scoped:
    """A role whose every async method runs in one sample scope (its arguments pass through untouched).

    Any other attribute is the role's own, and one the role lacks is lacking here too, so
    ``isinstance`` against a role Protocol (a sequential clarifier, a judge panel) answers as for the role.
    """

    def __init__(self, inner: Any, repeat: int, temperature: float | None) -> None:
        self.inner = inner
        self._sample = (repeat, temperature)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if not callable(found):
            return found

        def scoped(*args: Any, **kwargs: Any) -> Any:
            with sample_scope(*self._sample):
                out = found(*args, **kwargs)
            return self._within(out) if inspect.isawaitable(out) else out

        return scoped

    async def _within(self, work: Awaitable[Any]) -> Any:
        with sample_scope(*self._sample):
            return await work
