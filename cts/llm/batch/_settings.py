"""Typed views of ``services.llm.batch`` and of a model's ``batch:`` terms (``conf/model/<name>.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from cts.compose.schema import Batch

_D = Batch()
"""The schema's defaults of ``services.llm.batch``: :class:`BatchSettings` takes its own from them."""

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


@dataclass(frozen=True)
class BatchSettings:
    """``services.llm.batch``: which roles go through Batch APIs, and how batches are made and watched.

    Attributes:
        roles: Accounting roles (``ChatClient.role``) whose requests are batched; empty = none.
        max_requests: A batch is sent once it holds this many requests ...
        max_wait_s: ... or once its oldest request has waited this long.
        poll_s: Seconds between status polls of a running batch.
        max_submissions: Submissions of one request: an expired, cancelled or errored line is
            sent again in a later batch until this many; then the call fails on infrastructure (kind
            ``batch``: nothing cached or recorded, a rerun sends it again).
        window: The completion window asked for (``24h``, the one both providers offer).
        dir: The ledger's directory; None = the launch's dir (a sweep's dir, a single run's dir).
    """

    roles: tuple[str, ...] = tuple(_D.roles)
    max_requests: int = _D.max_requests
    max_wait_s: float = _D.max_wait_s
    poll_s: float = _D.poll_s
    max_submissions: int = _D.max_submissions
    window: str = _D.window
    dir: str | None = _D.dir

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> BatchSettings:
        """Parse the ``services.llm.batch`` mapping; unknown keys are an error (typos)."""
        data = dict(raw or {})
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown services.llm.batch keys: {sorted(unknown)}")
        data["roles"] = tuple(str(r) for r in (data.get("roles") or ()))
        return cls(**data)

    def takes(self, role: str) -> bool:
        """Whether ``role``'s requests go through a Batch API."""
        return role in self.roles
