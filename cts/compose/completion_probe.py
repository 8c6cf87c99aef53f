"""Completion pre-flight: one tiny paid completion per distinct request of a sweep.

``GET /models`` (:mod:`cts.compose.model_checks`) cannot see a parameter a provider rejects,
a model the key may not use, or a hosted API that is down. Before any job starts,
:func:`completion_probes` collects every distinct (model, endpoint, request
parameters) that the sweep's jobs will send, and :func:`run_probes` sends each one
once, concurrently, with an output cap of a few tokens, through the same runtime
path as the jobs (request rules, retries, rejection handling, the response cache:
a request accepted once is not paid for again, so a rerun sends nothing). A probe is
retried as a job's call would be (5xx, timeouts, connection errors and 429s, with backoff).
A failure names the model, the roles that use it and the provider's own message, and says
whose it is (:data:`CAUSES`): a 4xx rejection of the request is the model file's, a 5xx or a
timeout after the retries the endpoint's, a 401/403 the key's.
``services.llm.preflight_completion=false`` turns it off.
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
from cts.compose.schema import LLM
from cts.llm import CAP_FIELDS

PROBE_TOKENS = 8
"""Output cap of a probe (the model's reasoning allowance is added where reasoning counts against it)."""
PROBE_MESSAGES = ({"role": "user", "content": "Reply with the single word OK."},)
ENDPOINT_KINDS = frozenset({"server_error", "timeout", "connection", "rate_limit"})
"""Call failures that are the endpoint's (after the retries a job's call gets), not the request's."""
CAUSES = {
    "rejected": "Fix the model file (conf/model/<name>.yaml: params, request) or the role's params.",
    "endpoint": "The endpoint failed, not the model file: run the same command again once it answers "
    "(your server's log, or the provider's status page, says why).",
    "auth": "Check the key: the variable the model's api_key_env names, or services.llm.api_key.",
    "other": "Check the model's id (conf/model/<name>.yaml: id; services.llm.served_name for your own server) "
    "and its endpoint.",
}
"""What to do, by whose failure it is (the order the hints are printed in)."""


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
    cause: str = ""
    """Whose failure (a key of :data:`CAUSES`), when it failed."""


def completion_probes(cfgs: Sequence[DictConfig]) -> list[Probe]:
    """Every distinct (model, endpoint, params) the jobs ``cfgs`` send, in first-use order.

    Jobs with ``services.llm.preflight_completion=false`` and models whose key variable
    is unset (reported by :func:`cts.compose.model_checks.preflight_problems`) are left out.
    """
    from cts.llm import LLMSettings, ModelSpec, route_for

    found: dict[str, tuple[Probe, dict[str, None]]] = {}
    for cfg in cfgs:
        raw = resolved(OmegaConf.select(cfg, "services.llm", default=None)) or {}
        if not raw.get("preflight_completion", LLM().preflight_completion) or serves_locally(cfg):
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
    from cts.core.types import CallError, CircuitOpen, RequestRejected
    from cts.llm import LLMRuntime

    # Retried as the jobs' calls are (their max_attempts, backoff): a 5xx or a timeout is the endpoint's.
    runtime = LLMRuntime.from_settings({**probe.settings, "spend": {"max_usd": None}}, cache_dir)
    client = runtime.client(probe.spec, "preflight")
    try:
        done = await client.complete(list(PROBE_MESSAGES), max_output_tokens=PROBE_TOKENS, **dict(probe.params))
    except RequestRejected as exc:
        return ProbeResult(probe, runtime.spent_usd, problem=f"{probe.describe()}: {_said(exc)}", cause="rejected")
    except (CallError, CircuitOpen) as exc:
        return _failed(probe, runtime.spent_usd, exc)
    finally:
        runtime.cache.close()
    return ProbeResult(probe, done.cost_usd, 0 if done.cached else done.tokens_in + done.tokens_out)


def _failed(probe: Probe, spent_usd: float, exc: Exception) -> ProbeResult:
    """A probe that failed otherwise than by a rejection: the endpoint's, the key's, or another (404, config)."""
    from cts.llm._retry import classify

    kind = str(getattr(exc, "kind", ""))  # CircuitOpen: circuit_open (the endpoint failed again and again)
    if kind not in ENDPOINT_KINDS | {"auth", "circuit_open"}:
        return ProbeResult(probe, spent_usd, problem=f"{probe.describe()}: {_said(exc)}", cause="other")
    endpoint = getattr(exc, "endpoint", None) or probe.spec.get("api_base") or "the provider"
    status = classify(exc.__cause__).status if exc.__cause__ is not None else None
    what = f"HTTP {status}" if status else kind.replace("_", " ")
    problem = f"endpoint {endpoint} failed ({what}) for {probe.describe()}: {_said(exc)}"
    return ProbeResult(probe, spent_usd, problem=problem, cause="auth" if kind == "auth" else "endpoint")


def _said(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:600]


def completion_hints(failed: Sequence[ProbeResult]) -> str:
    """What to do about these failed probes: one line per cause among them (:data:`CAUSES`)."""
    causes = {r.cause or "other" for r in failed}
    return "\n".join(hint for cause, hint in CAUSES.items() if cause in causes)


def probe_report(results: Sequence[ProbeResult], elapsed_s: float) -> str:
    """One line: how many probes passed, in what time, at what cost."""
    cost = sum(r.cost_usd for r in results)
    tokens = sum(r.tokens for r in results)
    return f"cts pre-flight: {len(results)} completion probe(s) in {elapsed_s:.1f} s, {tokens} tokens, ${cost:.6f}"


def check_completions(cfgs: Sequence[DictConfig], cache_dir: Path, done: set[str]) -> tuple[list[ProbeResult], str]:
    """Probe the jobs' distinct requests not in ``done`` (then added to it); (the failed probes, report line or "")."""
    start = time.perf_counter()
    probes = [p for p in completion_probes(cfgs) if p.key not in done]
    if not probes:
        return [], ""
    results = run_probes(probes, cache_dir)
    done.update(r.probe.key for r in results if r.problem is None)
    return [r for r in results if r.problem], probe_report(results, time.perf_counter() - start)
