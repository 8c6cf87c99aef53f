"""Typed view of the ``services.llm`` config: the schema's node with what the runtime asks of it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cts.compat.config import upgrade_llm_settings
from cts.compose.schema import LLM, Backoff, key, key_at, node_from
from cts.llm._spec import plain_data
from cts.llm.batch._settings import BatchSettings
from cts.llm.cache import CACHE_MODES, CacheMode

__all__ = ["Backoff", "LLMSettings"]


@dataclass(frozen=True, kw_only=True)
class LLMSettings(LLM):
    """``services.llm`` as the runtime reads it: the schema's keys (:class:`cts.compose.schema.LLM`), no copy.

    A key added to the schema is a field here too, with its default and bounds; the runtime reads
    it where it uses it (``settings.<key>``).
    """

    batch: BatchSettings = key("roles sent through the providers' Batch APIs", BatchSettings, protocol=False)

    @property
    def cache_mode(self) -> CacheMode:
        """How calls use the response cache."""
        return self.cache.mode

    @property
    def cache_path(self) -> Path | None:
        """The SQLite file of the cache (None = ``<paths.cache_dir>/llm_cache.sqlite``)."""
        return Path(self.cache.path) if self.cache.path else None

    @property
    def cache_url(self) -> str | None:
        """A store URL (``sqlite:///...``, ``postgresql://...``); overrides :attr:`cache_path`."""
        return self.cache.url or None

    @property
    def max_usd(self) -> float | None:
        """USD the job dir may spend (None = no cap)."""
        return self.spend.max_usd

    def timeout_for(self, role: str) -> float:
        """The request timeout of calls booked under ``role`` (``role_timeout_s``, else ``timeout_s``)."""
        seconds = self.role_timeout_s.get(role)
        return self.timeout_s if seconds is None else seconds

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any] | None) -> LLMSettings:
        """Parse the ``services.llm`` mapping; unknown keys are an error (typos)."""
        raw = plain_data(settings or {})
        upgrade_llm_settings(raw)  # a job dir's stored config may say ``budget``
        raw["role_timeout_s"] = _role_timeouts(raw.get("role_timeout_s") or {})
        _check_retry_keys(raw)
        parsed = node_from(cls, raw, "services.llm")
        if parsed.cache.mode not in CACHE_MODES:
            raise ValueError(f"services.llm.cache.mode must be one of {CACHE_MODES}, got {parsed.cache.mode!r}")
        return parsed


def _role_timeouts(raw: Mapping[str, Any]) -> dict[str, float | None]:
    """``role_timeout_s`` checked: seconds > 0 per role, or null (= ``timeout_s``)."""
    if not isinstance(raw, Mapping):  # a config error, reported as the others are
        raise ValueError(f"services.llm.role_timeout_s must map roles to seconds, got {raw!r}")  # noqa: TRY004
    for role, seconds in raw.items():
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0):
            raise ValueError(
                f"services.llm.role_timeout_s.{role} must be a positive number of seconds, got {seconds!r}"
            )
    return {str(role): None if s is None else float(s) for role, s in raw.items()}


_RETRY_KEYS = ("timeout_s", "max_attempts", "max_timeout_attempts", "rate_limit_wait_s")
"""Retry and timeout keys checked here too (a library caller skips the launch's checks): a 0 timeout never answers."""


def _check_retry_keys(raw: Mapping[str, Any]) -> None:
    """Refuse retry and timeout settings that could never send or never stop, by the schema's bounds."""
    for name in _RETRY_KEYS:
        value = raw.get(name)
        info = key_at(f"services.llm.{name}")
        if value is not None and info is not None and info.check is not None and not info.check.test(value):
            raise ValueError(f"services.llm.{name} must be {info.check.expect}, got {value!r}")
