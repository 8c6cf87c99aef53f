"""Completion pre-flight: one tiny paid completion per distinct request of a sweep.

``GET /models`` (:mod:`cts.compose.model_checks`) cannot see a parameter a provider rejects,
a model the key may not use, or a hosted API that is down. Before any job starts,
:func:`completion_probes` collects every distinct (model, endpoint, request
parameters) that the sweep's jobs will send, and :func:`run_probes` sends each one
once, concurrently, with an output cap of a few tokens, through the same runtime
path as the jobs (request rules, retries, rejection handling, the response cache:
a request accepted once is not paid for again, so a rerun sends nothing). A failure
is reported like a dead endpoint: the model, the roles that use it and the provider's
own message. ``services.llm.preflight_completion=false`` turns it off.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cts._util.loops import run as run_loop
from cts.compose.model_checks import find_model_specs, resolved, serves_locally
from cts.compose.request_rules import call_params
from cts.llm import CAP_FIELDS

PROBE_TOKENS = 8
"""Output cap of a probe (the model's reasoning allowance is added where reasoning counts against it)."""
PROBE_MESSAGES = ({"role": "user", "content": "Reply with the single word OK."},)


@dataclass(frozen=True)
class Probe:
    """One distinct request of the sweep and the config paths that send it."""

    spec: Mapping[str, Any]
    params: Mapping[str, Any]
    """The role's decoding params (the spec's own are added by the runtime)."""
    settings: Mapping[str, Any]
    """The job's ``services.llm`` (first job that sends this request)."""
    paths: tuple[str, ...]
    key: str = ""
    """Identity of the request (model, endpoint, params): probed once per process."""

    def describe(self) -> str:
        """``model gpt (openai/gpt-5.2), used by clarifier.model``."""
        return f"model {self.spec.get('name')} ({self.spec.get('id')}), used by {', '.join(self.paths)}"


@dataclass(frozen=True)
class ProbeResult:
    """What one probe cost, or why it failed."""

    probe: Probe
    cost_usd: float = 0.0
    tokens: int = 0
    problem: str | None = None


def completion_probes(cfgs: Sequence[DictConfig]) -> list[Probe]:
    """Every distinct (model, endpoint, params) the jobs ``cfgs`` send, in first-use order.

    Jobs with ``services.llm.preflight_completion=false`` and models whose key variable
    is unset (reported by :func:`cts.compose.model_checks.preflight_problems`) are left out.
    """
    from cts.llm import LLMSettings, ModelSpec, route_for

    found: dict[str, tuple[Probe, dict[str, None]]] = {}
    for cfg in cfgs:
        raw = resolved(OmegaConf.select(cfg, "services.llm", default=None)) or {}
        if not raw.get("preflight_completion", True) or serves_locally(cfg):
            continue  # a local server cts starts is not up yet; its readiness wait checks it
        settings = LLMSettings.from_mapping(raw)
        specs = find_model_specs(cfg)
        paths_of_specs = {p for p, _ in specs}
        for path, node in specs:
            spec = resolved(node)
            if spec is None:
                continue
            route = route_for(ModelSpec.coerce(spec), settings)
            if route.missing_key:
                continue
            sent, _ = call_params(cfg, path, spec, paths_of_specs)
            params = {k: v for k, v in sent.items() if k not in CAP_FIELDS}  # the probe's own cap replaces them
            params.update(role_schema(cfg, path, spec, params))
            key = json.dumps(
                [route.model, route.api_base, spec.get("params"), spec.get("request"), params],
                sort_keys=True,
                default=str,
            )
            probe, paths = found.setdefault(key, (Probe(spec, params, raw, ()), {}))
            paths[path] = None
    return [Probe(p.spec, p.params, p.settings, tuple(paths), key) for key, (p, paths) in found.items()]


def role_schema(cfg: DictConfig, path: str, spec: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The ``response_format`` of a typical call of the role whose model is at ``path`` ({} when none is sent).

    The role's class says (``example_schema``); a role with ``structured: false``, or a
    ``response_format`` in its params, sends its own; a model whose request rules send no schema
    (``structured_output: none``, or JSON mode, which the probe's message does not ask for) gets none.
    Part of the probe's key: a changed schema is probed again, and one the provider refuses stops the launch.
    """
    from hydra.utils import get_object

    from cts.llm import RequestRules, applied_params
    from cts.roles.schemas import response_format

    parent_path, _, key = path.rpartition(".")
    parent = resolved(OmegaConf.select(cfg, parent_path, default=None)) if parent_path and key == "model" else None
    if not isinstance(parent, Mapping) or "response_format" in params or parent.get("structured") is False:
        return {}
    try:
        target = get_object(str(parent.get("_target_")))
    except (ImportError, AttributeError, ValueError):
        return {}
    schema = target.example_schema() if hasattr(target, "example_schema") else None
    if schema is None:
        return {}
    asked = {"response_format": response_format(str(getattr(target, "default_role", key)), schema)}
    sent = applied_params(RequestRules.coerce(spec.get("request")), asked, None, PROBE_MESSAGES).params
    return asked if "response_format" in sent else {}


def run_probes(probes: Sequence[Probe], cache_dir: Path) -> list[ProbeResult]:
    """Send every probe once, concurrently; one result each, in order.

    Args:
        cache_dir: Default home of the response cache (``paths.cache_dir``).
    """
    if not probes:
        return []
    quiet = [logging.getLogger(name) for name in ("httpx", "httpcore")]
    levels = [q.level for q in quiet]
    for q in quiet:  # one INFO line per request would reach the console of the launching process
        q.setLevel(logging.WARNING)
    try:
        return run_loop(_run_all(probes, cache_dir))
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)


async def _run_all(probes: Sequence[Probe], cache_dir: Path) -> list[ProbeResult]:
    return list(await asyncio.gather(*(_run_one(p, cache_dir) for p in probes)))


async def _run_one(probe: Probe, cache_dir: Path) -> ProbeResult:
    from cts.core.types import CallError, CircuitOpen
    from cts.llm import LLMRuntime

    runtime = LLMRuntime.from_settings(
        {**probe.settings, "max_attempts": 2, "max_timeout_attempts": 1, "spend": {"max_usd": None}}, cache_dir
    )
    client = runtime.client(probe.spec, "preflight")
    try:
        done = await client.complete(list(PROBE_MESSAGES), max_output_tokens=PROBE_TOKENS, **dict(probe.params))
    except (CallError, CircuitOpen) as exc:
        return ProbeResult(probe, runtime.spent_usd, problem=f"{probe.describe()}: {' '.join(str(exc).split())[:600]}")
    finally:
        runtime.cache.close()
    return ProbeResult(probe, done.cost_usd, 0 if done.cached else done.tokens_in + done.tokens_out)


def probe_report(results: Sequence[ProbeResult], elapsed_s: float) -> str:
    """One line: how many probes passed, in what time, at what cost."""
    cost = sum(r.cost_usd for r in results)
    tokens = sum(r.tokens for r in results)
    return f"cts pre-flight: {len(results)} completion probe(s) in {elapsed_s:.1f} s, {tokens} tokens, ${cost:.6f}"


def check_completions(cfgs: Sequence[DictConfig], cache_dir: Path, done: set[str]) -> tuple[list[str], str]:
    """Probe the jobs' distinct requests not in ``done`` (then added to it); (problems, report line or "")."""
    start = time.perf_counter()
    probes = [p for p in completion_probes(cfgs) if p.key not in done]
    if not probes:
        return [], ""
    results = run_probes(probes, cache_dir)
    done.update(r.probe.key for r in results if r.problem is None)
    return [r.problem for r in results if r.problem], probe_report(results, time.perf_counter() - start)
