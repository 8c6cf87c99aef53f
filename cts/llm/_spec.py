"""Model specs: one per entry of the ``conf/model/`` registry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cts.compat.config import old_model_id_key
from cts.llm._rules import RequestRules
from cts.llm.batch._settings import BatchTerms


def plain_data(value: Any) -> Any:
    """Turn OmegaConf containers (or any mappings/sequences) into plain Python."""
    if isinstance(value, Mapping):
        return {str(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
        return [plain_data(v) for v in value]
    return value


@dataclass(frozen=True)
class ModelSpec:
    """One model endpoint of the registry (``conf/model/<name>.yaml``).

    Attributes:
        name: Short registry name, e.g. ``gpt``.
        id: litellm model id, e.g. ``openai/gpt-5.2`` (``id:`` in the model file; ``model:`` before
            the rename, refused with a message by :meth:`coerce` and the start-up check).
        api_base: Endpoint URL for OpenAI-compatible servers (None = provider default).
        api_key_env: Name of the environment variable holding the key (never the key);
            None for keyless local servers.
        params: Decoding params sent with every call (temperature 0, ...).
        input_cost_per_token: USD per prompt token.
        output_cost_per_token: USD per completion token.
        max_concurrency: Cap on calls in flight to this endpoint (None = runtime default).
        min_concurrency: Floor of the endpoint's adaptive limit (None = ``services.llm.adaptive.floor``).
        request: What the provider accepts (``request:`` in the model file; see :mod:`cts.llm._rules`).
        batch: The provider's Batch API for this model and its prices (None: none cts can reach).
    """

    name: str
    id: str
    api_base: str | None = None
    api_key_env: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    input_cost_per_token: float = 0.0
    output_cost_per_token: float = 0.0
    max_concurrency: int | None = None
    min_concurrency: int | None = None
    request: RequestRules = field(default_factory=RequestRules)
    batch: BatchTerms | None = None

    def __post_init__(self) -> None:
        # Hydra hands over DictConfig: keep a plain copy (picklable, deep-copyable, JSON-able).
        object.__setattr__(self, "params", plain_data(self.params or {}))
        object.__setattr__(self, "request", RequestRules.coerce(plain_data(self.request)))
        object.__setattr__(self, "batch", BatchTerms.coerce(plain_data(self.batch)))

    @classmethod
    def coerce(cls, value: ModelSpec | Mapping[str, Any]) -> ModelSpec:
        """Return ``value`` as a ModelSpec (accepts a spec or a config mapping).

        Raises:
            ValueError: ``value`` names the litellm id ``model:``, its key before the rename to ``id:``.
        """
        if isinstance(value, ModelSpec):
            return value
        fields = {k: v for k, v in plain_data(value).items() if not k.startswith("_")}
        if problem := old_model_id_key(fields):
            raise ValueError(problem)
        return cls(**fields)

    @property
    def provider(self) -> str:
        """The litellm provider prefix of :attr:`id` (``openai`` when absent)."""
        return self.id.split("/", 1)[0] if "/" in self.id else "openai"
