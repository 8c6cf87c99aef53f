"""One schedule for a whole multirun: jobs share one event loop, one LLM runtime, one orig arm.

The ``cts`` Hydra launcher (``hydra/launcher=cts``, in ``hydra_plugins/cts_scheduler``)
opens a :class:`SweepSession` and runs every job of the sweep in it at once. The
hooks below are what the rest of cts calls; outside a session they do what a
single job always did.
"""

from cts.sweep._session import (
    Started,
    SweepSession,
    current_session,
    orig_share_for,
    shared_llm_runtime,
    start_async,
    sweep_progress,
)

__all__ = [
    "Started",
    "SweepSession",
    "current_session",
    "orig_share_for",
    "shared_llm_runtime",
    "start_async",
    "sweep_progress",
]
