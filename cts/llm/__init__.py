"""The LLM layer: model specs, the per-job runtime, chat clients and accounting.

Importing this package does not import litellm (that happens on the first call),
so config checks such as :mod:`cts.compose.model_checks` stay fast.
"""

from cts.core.contracts import Chat, Completion, InFlight
from cts.llm._adaptive import (
    Adaptive,
    AdaptiveLimiter,
    LimiterSnapshot,
    calls_in_flight,
    limiter_snapshots,
    priority_scope,
)
from cts.llm._audit import Audit, RoleRequests, audit_scope
from cts.llm._calls import CallEvent, route_for
from cts.llm._client import ChatClient
from cts.llm._localserver import LocalLLMServer, LocalServerError
from cts.llm._rules import (
    CAP_FIELDS,
    STRUCTURED_OUTPUTS,
    Applied,
    RequestRules,
    applied_params,
    response_format_kind,
    rule_violations,
)
from cts.llm._runtime import LLMRuntime, settled
from cts.llm._settings import Backoff, LLMSettings
from cts.llm._spec import ModelSpec
from cts.llm._usage import USAGE_KEYS, usage_scope
from cts.llm.cache import ResponseCache
from cts.llm.sampling import current_sample, sample_scope

__all__ = [
    "Audit",
    "RoleRequests",
    "audit_scope",
    "Adaptive",
    "AdaptiveLimiter",
    "InFlight",
    "calls_in_flight",
    "LimiterSnapshot",
    "limiter_snapshots",
    "priority_scope",
    "USAGE_KEYS",
    "Backoff",
    "CAP_FIELDS",
    "RequestRules",
    "rule_violations",
    "STRUCTURED_OUTPUTS",
    "Applied",
    "applied_params",
    "response_format_kind",
    "CallEvent",
    "Chat",
    "ChatClient",
    "Completion",
    "LLMRuntime",
    "LLMSettings",
    "LocalLLMServer",
    "LocalServerError",
    "ModelSpec",
    "ResponseCache",
    "route_for",
    "sample_scope",
    "current_sample",
    "settled",
    "usage_scope",
]
