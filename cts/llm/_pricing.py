"""Per-token prices from the registry, registered with litellm."""

from __future__ import annotations

from typing import Any

from cts.llm._spec import ModelSpec


def call_cost(spec: ModelSpec, tokens_in: int, tokens_out: int) -> float:
    """USD cost of one call at the spec's list prices."""
    return tokens_in * spec.input_cost_per_token + tokens_out * spec.output_cost_per_token


def register_prices(litellm: Any, spec: ModelSpec, model: str) -> None:
    """Tell litellm the spec's prices for ``model``, the id actually sent.

    Self-hosted ids are unknown to litellm, which then searches its whole price
    table on every call (about 4 ms of CPU per call); a registered entry, even
    at price 0, makes that lookup a dict hit. Costs we report come from the
    spec itself (:func:`call_cost`), so both always agree.
    """
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    entry = {
        "input_cost_per_token": spec.input_cost_per_token,
        "output_cost_per_token": spec.output_cost_per_token,
        "litellm_provider": provider,
        "mode": "chat",
    }
    litellm.register_model({model: entry})
