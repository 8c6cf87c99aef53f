"""Per-token prices from the registry, registered with litellm."""

from __future__ import annotations

from typing import Any

from cts.llm._settings import LLMSettings
from cts.llm._spec import ModelSpec

Prices = tuple[float, float]
"""USD per prompt token and per completion token."""


def route_prices(spec: ModelSpec, settings: LLMSettings) -> Prices:
    """The prices of the endpoint a spec's calls actually go to.

    With ``services.llm.api_base`` every role runs on the user's own server, so
    the registry's hosted list prices do not apply: the price is
    ``services.llm.api_base_price`` (0 unless the user sets one).
    """
    if settings.api_base:
        price = settings.api_base_price
        return price.input_cost_per_token, price.output_cost_per_token
    return spec.input_cost_per_token, spec.output_cost_per_token


def call_cost(prices: Prices, tokens_in: int, tokens_out: int) -> float:
    """USD cost of one call at ``prices``."""
    return tokens_in * prices[0] + tokens_out * prices[1]


def register_prices(litellm: Any, prices: Prices, model: str) -> None:
    """Tell litellm the ``prices`` of ``model``, the id actually sent.

    Self-hosted ids are unknown to litellm, which then searches its whole price
    table on every call (about 4 ms of CPU per call); a registered entry, even
    at price 0, makes that lookup a dict hit. Costs we report come from the
    same prices (:func:`call_cost`), so both always agree.
    """
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    entry = {
        "input_cost_per_token": prices[0],
        "output_cost_per_token": prices[1],
        "litellm_provider": provider,
        "mode": "chat",
    }
    litellm.register_model({model: entry})
