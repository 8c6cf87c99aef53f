"""The one place that imports litellm, configured for offline, quiet use."""

from __future__ import annotations

import functools
import logging
import os
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
