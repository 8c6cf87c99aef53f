"""Typed views of ``services.llm.batch`` and of a model's ``batch:`` terms (``conf/model/<name>.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cts.compose.schema import Batch, node_from

BatchApi = Literal["openai", "anthropic"]
BATCH_APIS: tuple[BatchApi, ...] = ("openai", "anthropic")


@dataclass(frozen=True)
class BatchTerms:
    """What a provider's Batch API offers for one model (a model file's ``batch:`` node).

    Attributes:
        api: The wire format: ``openai`` (files + ``/v1/batches``; vLLM's and OpenAI's) or
            ``anthropic`` (Message Batches).
        input_cost_per_token: USD per prompt token of a batched request.
        output_cost_per_token: USD per completion token of a batched request.
        source: Where the provider documents the batch price.
    """

    api: BatchApi
    input_cost_per_token: float
    output_cost_per_token: float
    source: str = ""

    @classmethod
    def coerce(cls, value: BatchTerms | Mapping[str, Any] | None) -> BatchTerms | None:
        """``value`` as terms (None: the model has no Batch API cts can reach)."""
        if value is None or isinstance(value, BatchTerms):
            return value
        raw = dict(value)
        if raw.get("api") not in BATCH_APIS:
            raise ValueError(f"batch.api must be one of {BATCH_APIS}, got {raw.get('api')!r}")
        return cls(**raw)


@dataclass(frozen=True, kw_only=True)
class BatchSettings(Batch):
    """``services.llm.batch``: which roles go through Batch APIs, and how batches are made and watched.

    The schema's keys (:class:`cts.compose.schema._run.Batch`: roles, max_requests, max_wait_s,
    poll_s, max_submissions, window, dir), with what the broker asks of them.
    """

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> BatchSettings:
        """Parse the ``services.llm.batch`` mapping; unknown keys are an error (typos)."""
        data = dict(raw or {})
        data["roles"] = [str(r) for r in (data.get("roles") or ())]
        return node_from(cls, data, "services.llm.batch")

    def takes(self, role: str) -> bool:
        """Whether ``role``'s requests go through a Batch API."""
        return role in self.roles
