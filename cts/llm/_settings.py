"""Typed view of the ``services.llm`` config (``conf/llm/default.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cts.compat.config import upgrade_llm_settings
from cts.llm._adaptive import Adaptive
from cts.llm._spec import plain_data
from cts.llm._transport import Transport
from cts.llm.batch._settings import BatchSettings
from cts.llm.cache import CACHE_MODES, CacheMode


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter between retries (seconds)."""

    initial: float = 1.0
    max: float = 30.0
    jitter: float = 1.0
    max_retry_after: float = 60.0
    """Upper bound on a server's Retry-After that we honour."""


@dataclass(frozen=True)
class Price:
    """USD per token charged by an endpoint."""

    input_cost_per_token: float = 0.0
    output_cost_per_token: float = 0.0


@dataclass(frozen=True)
class LLMSettings:
    """Runtime settings; see ``conf/llm/default.yaml`` for what each key means."""

    cache_mode: CacheMode = "read_write"
    cache_path: Path | None = None
    cache_url: str | None = None
    """A store URL (``sqlite:///...``, ``postgresql://...``); overrides ``cache_path``."""
    api_base: str | None = None
    api_key: str | None = None
    served_name: str | None = None
    """Model name sent to ``api_base`` (vLLM's ``--served-model-name``); None = the registry id without its prefix."""
    concurrency_per_endpoint: int = 16
    timeout_s: float = 120.0
    """Seconds a request may take before it counts as timed out (roles not in ``role_timeout_s``)."""
    role_timeout_s: tuple[tuple[str, float], ...] = ()
    """Per accounting role (``ChatClient.role``): its own request timeout (see :meth:`timeout_for`)."""
    max_attempts: int = 6
    """Attempts per call that may fail on a timeout, connection error or 5xx (429s: ``rate_limit_wait_s``)."""
    max_timeout_attempts: int = 2
    """Of those, attempts that may time out: a call that timed out this often fails."""
    rate_limit_wait_s: float = 300.0
    """Total seconds one call may wait on 429s before it fails (each wait charged at least ``backoff.initial``)."""
    backoff: Backoff = field(default_factory=Backoff)
    adaptive: Adaptive = field(default_factory=Adaptive)
    max_reasks: int = 2
    max_usd: float | None = None
    api_base_price: Price = field(default_factory=Price)
    """Price of ``api_base`` (the user's own server): 0 unless set; registry prices are not used there."""
    tracing: bool = False
    transport: Transport = "openai"
    breaker_failures: int | None = 20
    """Consecutive connection-level failures of one endpoint that stop the job (0/None: never)."""
    breaker_timeouts: int | None = 8
    """Consecutive timed-out requests of one endpoint that stop the job (0/None: never)."""
    preflight_probe: bool = True
    """Probe every endpoint with an ``api_base`` (GET /models) before any job starts."""
    preflight_timeout_s: float = 5.0
    preflight_completion: bool = True
    """One minimal completion per distinct (model, endpoint, params) before any job starts."""
    batch: BatchSettings = field(default_factory=BatchSettings)
    """Roles whose requests go through the providers' Batch APIs (:mod:`cts.llm.batch`)."""

    def timeout_for(self, role: str) -> float:
        """The request timeout of calls booked under ``role``."""
        return dict(self.role_timeout_s).get(role, self.timeout_s)

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> LLMSettings:
        """Parse the ``services.llm`` mapping; unknown keys are an error (typos)."""
        raw = plain_data(settings or {})
        cache = raw.pop("cache", None) or {}
        spend = upgrade_llm_settings(raw).pop("spend", None) or {}
        backoff = raw.pop("backoff", None) or {}
        price = raw.pop("api_base_price", None) or {}
        adaptive = raw.pop("adaptive", None) or {}
        batch = BatchSettings.from_mapping(raw.pop("batch", None))
        raw["role_timeout_s"] = _role_timeouts(raw.pop("role_timeout_s", None) or {})
        _check_retry_keys(raw)
        known = {f.name for f in fields(cls)} - {
            "cache_mode",
            "cache_path",
            "cache_url",
            "max_usd",
            "backoff",
            "api_base_price",
            "adaptive",
            "batch",
        }
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown services.llm keys: {sorted(unknown)}")
        mode = cache.get("mode") or "read_write"
        if mode not in CACHE_MODES:
            raise ValueError(f"services.llm.cache.mode must be one of {CACHE_MODES}, got {mode!r}")
        path = cache.get("path")
        return cls(
            cache_mode=mode,
            cache_path=Path(path) if path else None,
            cache_url=cache.get("url") or None,
            max_usd=spend.get("max_usd"),
            backoff=Backoff(**backoff),
            api_base_price=Price(**price),
            adaptive=Adaptive(**adaptive),
            batch=batch,
            **raw,
        )


def _role_timeouts(raw: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    """``role_timeout_s`` as sorted (role, seconds) pairs; null values (= ``timeout_s``) left out."""
    if not isinstance(raw, Mapping):  # a config error, reported as the others are
        raise ValueError(f"services.llm.role_timeout_s must map roles to seconds, got {raw!r}")  # noqa: TRY004
    pairs = []
    for role, seconds in raw.items():
        if seconds is None:
            continue
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
            raise ValueError(
                f"services.llm.role_timeout_s.{role} must be a positive number of seconds, got {seconds!r}"
            )
        pairs.append((str(role), float(seconds)))
    return tuple(sorted(pairs))


_LOWER_BOUNDS: dict[str, tuple[float, bool]] = {
    "timeout_s": (0.0, False),
    "max_attempts": (1, True),
    "max_timeout_attempts": (1, True),
    "rate_limit_wait_s": (0.0, True),
}
"""Retry and timeout keys: (least value, whether it is allowed); a 0 timeout would never answer."""


def _check_retry_keys(raw: Mapping[str, Any]) -> None:
    """Refuse retry and timeout settings that could never send or never stop (a typo's usual result)."""
    for key, (least, allowed) in _LOWER_BOUNDS.items():
        value = raw.get(key)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or value < least or (value == least and not allowed):
            raise ValueError(f"services.llm.{key} must be a number {'>=' if allowed else '>'} {least:g}, got {value!r}")
