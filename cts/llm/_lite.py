"""The one place that imports litellm, configured for offline, quiet use."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
from types import ModuleType


@functools.cache
def litellm_module() -> ModuleType:
    """Import litellm once with its network fetches and ``.env`` loading off.

    ``LITELLM_OFFLINE_MODE`` stops the import fetching a price map from the
    internet (5-11 s here); ``LITELLM_MODE=PRODUCTION`` stops it reading ``./.env``.
    """
    os.environ["LITELLM_OFFLINE_MODE"] = "true"
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ["LITELLM_MODE"] = "PRODUCTION"
    import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    litellm.num_retries = 0
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return litellm


async def stop_logging_worker(timeout_s: float = 5.0) -> None:
    """Stop litellm's logging worker if its task runs on this loop, after its queued callbacks.

    Its task waits on its queue for ever, so a loop that waits for its tasks to end (a sweep's
    drain, :mod:`cts.sweep._session`) would otherwise wait out its whole timeout (30 s) after
    any litellm call.
    """
    if "litellm" not in sys.modules:
        return
    from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER as worker

    task = getattr(worker, "_worker_task", None)
    if task is None or task.get_loop() is not asyncio.get_running_loop():
        return
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(worker.flush(), timeout_s)
    await worker.stop(timeout=timeout_s)
