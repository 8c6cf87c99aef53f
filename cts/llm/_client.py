"""What a role holds to call its model: the :class:`Chat` Protocol and the runtime's :class:`ChatClient`.

Roles and search agents receive a :class:`Chat` from the composition layer
(:mod:`cts.compose.services` builds it from the model registry); they never see the runtime
or provider details.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from cts.core.contracts import Completion, Route
from cts.llm._calls import route_for
from cts.llm._settings import LLMSettings
from cts.llm._spec import ModelSpec


class _Runtime(Protocol):
    settings: LLMSettings

    async def _complete(
        self,
        client: ChatClient,
        messages: list[dict[str, str]],
        version: str,
        params: Mapping[str, Any],
        max_output_tokens: int | None = None,
    ) -> Completion: ...


class ChatClient:
    """Calls one model for one role through the runtime (cache, retries, accounting)."""

    def __init__(self, runtime: _Runtime, spec: ModelSpec, role: str) -> None:
        self.runtime = runtime
        self.spec = spec
        self.role = role

    def __repr__(self) -> str:
        return f"ChatClient({self.spec.name!r}, role={self.role!r})"

    @property
    def route(self) -> Route:
        """Where the calls go (model id and endpoint after the ``services.llm`` overrides)."""
        return route_for(self.spec, self.runtime.settings)

    def with_role(self, role: str) -> ChatClient:
        """The same model and runtime, its usage booked under ``role``."""
        return self if role == self.role else ChatClient(self.runtime, self.spec, role)

    async def complete(
        self,
        messages: list[dict[str, str]],
        *,
        prompt_version: str = "",
        max_output_tokens: int | None = None,
        **params: Any,
    ) -> Completion:
        """Return the model's reply to ``messages``.

        Args:
            messages: OpenAI-style chat messages.
            prompt_version: Hash of the prompt template (part of the cache key).
            max_output_tokens: The role's output cap, sent under the provider's field name
                (raised by the model's reasoning allowance where reasoning counts against it).
            **params: Decoding params overriding the spec's.

        Raises:
            CallError: The call failed for good (``kind``: rate_limit, timeout, ...).
            SpendLimitReached: The job's ``services.llm.spend.max_usd`` is spent (checked before sending).
            CircuitOpen: The endpoint failed ``breaker_failures`` times in a row (the job stops);
                :class:`cts.core.types.RequestRejected` when the provider refused the request as invalid.
        """
        return await self.runtime._complete(self, messages, prompt_version, params, max_output_tokens)
