"""What a job's records say it cost, per instance, and where its calls go (endpoints, prices)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cts.compose.schema import Batch
from cts.llm import LLMSettings, ModelSpec, route_for
from cts.plan.batched import RoleRate, rates_of, repriced, window_s
from cts.plan.forecast import InstanceCost
from cts.protocol.job_files import RECORDS_FILE

__all__ = ["Routes", "instance_costs", "prices_of", "raw_records", "routes_of", "run_id"]


@dataclass(frozen=True)
class Routes:
    """Where a job's LLM calls go.

    Attributes:
        endpoint: Config path of each model spec (``clarifier.model``) -> its endpoint.
        concurrency: Endpoint -> calls in flight it takes (a model's ``max_concurrency`` or the runtime's ceiling).
        unpriced: Spec path -> model name, for models whose route has no price.
        batch_rates: Per role in ``services.llm.batch.roles``: how a batch prices its calls (empty: none batched).
        batch_window: ``services.llm.batch.window``, the longest a batch takes.
    """

    endpoint: Mapping[str, str]
    concurrency: Mapping[str, int]
    unpriced: Mapping[str, str]
    batch_rates: Mapping[str, RoleRate] = field(default_factory=dict)
    batch_window: str = Batch().window

    @property
    def batched(self) -> tuple[str, ...]:
        """The batched roles."""
        return tuple(self.batch_rates)

    @property
    def batch_window_s(self) -> float:
        """:attr:`batch_window` in seconds."""
        return window_s(self.batch_window)

    def of_role(self, role: str) -> str:
        """The endpoint of an accounting role: its group's model, else the one endpoint every model shares."""
        if f"{role}.model" in self.endpoint:
            return self.endpoint[f"{role}.model"]
        shared = set(self.endpoint.values())
        return shared.pop() if len(shared) == 1 else "other"

    def unpriced_used(self, roles: Sequence[str]) -> tuple[str, ...]:
        """The unpriced models that the roles with requests reach (a role with no model of its own reaches all)."""
        paths = {f"{r}.model" for r in roles}
        reaches_all = any(p not in self.endpoint for p in paths)
        return tuple(sorted({m for p, m in self.unpriced.items() if reaches_all or p in paths}))


def routes_of(cfg: DictConfig, groups: Sequence[str]) -> Routes:
    """The routes of the model specs under ``groups`` of a job config (the groups its task calls)."""
    from cts.compose.model_checks import find_model_specs, spec_role
    from cts.llm._batched import batch_prices

    llm = OmegaConf.to_container(cfg.services.llm, resolve=True)
    assert isinstance(llm, dict)
    settings = LLMSettings.from_mapping({str(k): v for k, v in llm.items()})
    endpoint: dict[str, str] = {}
    concurrency: dict[str, int] = {}
    unpriced: dict[str, str] = {}
    prices = []
    for path, node in find_model_specs(OmegaConf.masked_copy(cfg, [g for g in groups if g in cfg])):
        values = OmegaConf.to_container(node, resolve=True)
        assert isinstance(values, dict)  # a DictConfig node
        spec = ModelSpec.coerce({str(k): v for k, v in values.items()})
        route = route_for(spec, settings)
        endpoint[path] = route.endpoint
        concurrency[route.endpoint] = min(concurrency.get(route.endpoint, route.limit), route.limit)
        if not any(prices_of(spec, settings)):
            unpriced[path] = spec.name
        prices.append((spec_role(path), prices_of(spec, settings), batch_prices(spec, settings)))
    rates = rates_of(prices, settings.batch.roles)
    return Routes(endpoint, concurrency, unpriced, rates, settings.batch.window)


def prices_of(spec: ModelSpec, settings: LLMSettings) -> tuple[float, float]:
    """The per-token prices a spec's calls are billed at (``services.llm.api_base_price`` on api_base)."""
    if settings.api_base:
        return settings.api_base_price.input_cost_per_token, settings.api_base_price.output_cost_per_token
    return spec.input_cost_per_token or 0.0, spec.output_cost_per_token or 0.0


def raw_records(job_dir: Path, skip: int = 0) -> Iterator[dict[str, Any]]:
    """The records of a job dir as JSON objects (keys other versions add kept), after the first ``skip``."""
    path = Path(job_dir) / RECORDS_FILE
    if not path.exists():
        return
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i < skip or not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a killed process


def count_records(job_dir: Path) -> int:
    """Lines of a job dir's records file (0 when it has none)."""
    path = Path(job_dir) / RECORDS_FILE
    return sum(1 for _ in path.open(encoding="utf-8")) if path.exists() else 0


def instance_cost(record: Mapping[str, Any], routes: Routes) -> InstanceCost:
    """One record's fresh usage as an :class:`InstanceCost`."""
    usage: Mapping[str, Mapping[str, float]] = record.get("usage") or {}
    counts = {"calls": 0.0, "tokens_in": 0.0, "tokens_out": 0.0, "tokens_reasoning": 0.0, "usd": 0.0}
    by_endpoint: dict[str, float] = {}
    latencies = []
    for role, row in usage.items():
        requests = float(row.get("requests", 0.0))
        counts["calls"] += requests
        for key in ("tokens_in", "tokens_out", "tokens_reasoning"):
            counts[key] += float(row.get(key, 0.0))
        counts["usd"] += float(row.get("cost_usd", 0.0))
        endpoint = routes.of_role(role)
        by_endpoint[endpoint] = by_endpoint.get(endpoint, 0.0) + requests
        calls = float(row.get("calls", 0.0))
        if calls and requests and not row.get("cache_hits") and not row.get("errors"):
            latencies.append(float(row.get("latency_s", 0.0)) / calls)
    counts["usd_batch"], counts["calls_live"] = repriced(usage, routes.batch_rates)
    return InstanceCost(
        record_run_id(record), counts, by_endpoint, tuple(latencies), float(record.get("elapsed_s") or 0.0)
    )


def instance_costs(job_dir: Path, routes: Routes, skip: int = 0) -> list[InstanceCost]:
    """Every record's :func:`instance_cost` (after the first ``skip`` records), the last per instance id."""
    costs = {record_run_id(r): instance_cost(r, routes) for r in raw_records(job_dir, skip)}
    return list(costs.values())


def run_id(instance_id: str, repeat: int = 0) -> str:
    """One run of an instance: its id, with the repeat after ``#`` from repeat 1 on (each repeat is a sample)."""
    return f"{instance_id}#{repeat}" if repeat else str(instance_id)


def record_run_id(record: Mapping[str, Any]) -> str:
    """The :func:`run_id` of a record (a record of repeat 0 leaves the key out)."""
    return run_id(str(record.get("id")), int(record.get("repeat") or 0))


def roles_with_requests(job_dir: Path) -> list[str]:
    """The accounting roles that sent a request in a job dir's records."""
    roles = {role for r in raw_records(job_dir) for role, row in (r.get("usage") or {}).items() if row.get("requests")}
    return sorted(roles)
