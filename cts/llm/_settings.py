"""Typed view of the ``services.llm`` config (``conf/llm/default.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cts.compose.schema import LLM, Adaptive, Backoff, Price, key_at
from cts.llm._spec import plain_data
from cts.llm._transport import Transport
from cts.llm.batch._settings import BatchSettings
from cts.llm.cache import CACHE_MODES, CacheMode

_D = LLM()
"""The schema's defaults of ``services.llm``: the settings below take theirs from it, not a copy."""


@dataclass(frozen=True)
class LLMSettings:
    """Runtime settings of ``services.llm``; each key's default and meaning are its schema's (:class:`cts.compose.schema.LLM`)."""

    cache_mode: CacheMode = _D.cache.mode
    cache_path: Path | None = None  # the schema's null
    cache_url: str | None = _D.cache.url
    """A store URL (``sqlite:///...``, ``postgresql://...``); overrides ``cache_path``."""
    api_base: str | None = _D.api_base
    api_key: str | None = _D.api_key
    served_name: str | None = _D.served_name
    """Model name sent to ``api_base`` (vLLM's ``--served-model-name``); None = the registry id without its prefix."""
    concurrency_per_endpoint: int = _D.concurrency_per_endpoint
    timeout_s: float = _D.timeout_s
    """Seconds a request may take before it counts as timed out (roles not in ``role_timeout_s``)."""
    role_timeout_s: tuple[tuple[str, float], ...] = field(default_factory=lambda: _role_timeouts(_D.role_timeout_s))
    """Per accounting role (``ChatClient.role``): its own request timeout (see :meth:`timeout_for`)."""
    max_attempts: int = _D.max_attempts
    """Attempts per call that may fail on a timeout, connection error or 5xx (429s: ``rate_limit_wait_s``)."""
    max_timeout_attempts: int = _D.max_timeout_attempts
    """Of those, attempts that may time out: a call that timed out this often fails."""
    rate_limit_wait_s: float = _D.rate_limit_wait_s
    """Total seconds one call may wait on 429s before it fails (each wait charged at least ``backoff.initial``)."""
    backoff: Backoff = _D.backoff
    adaptive: Adaptive = _D.adaptive
    max_reasks: int = _D.max_reasks
    max_usd: float | None = _D.spend.max_usd
    api_base_price: Price = _D.api_base_price
    """Price of ``api_base`` (the user's own server): 0 unless set; registry prices are not used there."""
    tracing: bool = _D.tracing
    transport: Transport = _D.transport
    breaker_failures: int | None = _D.breaker_failures
    """Consecutive connection-level failures of one endpoint that stop the job (0/None: never)."""
    breaker_timeouts: int | None = _D.breaker_timeouts
    """Consecutive timed-out requests of one endpoint that stop the job (0/None: never)."""
    preflight_probe: bool = _D.preflight_probe
    """Probe every endpoint with an ``api_base`` (GET /models) before any job starts."""
    preflight_timeout_s: float = _D.preflight_timeout_s
    preflight_completion: bool = _D.preflight_completion
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
        old_spend = raw.pop("budget", None) or {}  # the name before ``spend`` (a job dir's stored config)
        spend = raw.pop("spend", None) or old_spend
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


_RETRY_KEYS = ("timeout_s", "max_attempts", "max_timeout_attempts", "rate_limit_wait_s")
"""Retry and timeout keys checked here too (a library caller skips the launch's checks): a 0 timeout never answers."""


def _check_retry_keys(raw: Mapping[str, Any]) -> None:
    """Refuse retry and timeout settings that could never send or never stop, by the schema's bounds."""
    for name in _RETRY_KEYS:
        value = raw.get(name)
        info = key_at(f"services.llm.{name}")
        if value is not None and info is not None and info.check is not None and not info.check.test(value):
            raise ValueError(f"services.llm.{name} must be {info.check.expect}, got {value!r}")
