"""Pre-flight check: can every model in the composed config be reached?

Runs on the composed config before anything is instantiated, without importing
litellm, in two steps:

1. :func:`preflight_problems`: every key variable (or ``api_base``) is set; a run with
   missing keys fails within a second or two and names every missing variable by its
   config path.
2. :func:`probe_problems` over :func:`endpoints_of`: every distinct endpoint with an
   ``api_base`` (a self-hosted server, the one ``services.llm.api_base``, or a hosted
   OpenAI-compatible API such as Qianfan) gets one ``GET {api_base}/models``, which is
   free (no tokens). Unreachable (refused, DNS, TLS, no answer within
   ``services.llm.preflight_timeout_s``) or a rejected key (401/403) fails the
   pre-flight, naming the endpoint, its models and the roles that use it. Hosted APIs
   reached through their provider's default URL (``anthropic/``, ``gemini/``, ``openai/``
   without ``api_base``, ...) are not probed: their key is checked by step 1, and a
   completion probe would cost money; if they fail at run time, the per-endpoint
   circuit breaker stops the job. ``services.llm.preflight_probe=false`` skips step 2.
"""

from __future__ import annotations

import logging
import os
import re
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from cts.core.stages import batch_roles

__all__ = [
    "MODEL_SPEC_TARGET",
    "Endpoint",
    "endpoints_of",
    "find_model_specs",
    "preflight_problems",
    "probe",
    "probe_problems",
    "resolved",
    "spec_key_problems",
    "batch_problems",
    "spec_role",
]

log = logging.getLogger(__name__)

MODEL_SPEC_TARGET = "cts.llm.ModelSpec"
_SKIP = frozenset({"hydra"})


def find_model_specs(cfg: DictConfig) -> list[tuple[str, DictConfig]]:
    """Every config node whose ``_target_`` is :class:`cts.llm.ModelSpec`.

    Args:
        cfg: The composed config.

    Returns:
        ``(path, node)`` pairs, e.g. ``("clarifier.model", <node>)``, in config order.
    """
    if not OmegaConf.is_readonly(cfg):
        return list(_walk(cfg, ""))
    key = id(cfg)
    hit = _SPECS.get(key)
    if hit is None or hit[0]() is not cfg:
        hit = (weakref.ref(cfg, lambda _gone: _SPECS.pop(key, None)), tuple(_walk(cfg, "")))
        _SPECS[key] = hit
    return list(hit[1])


_SPECS: dict[int, tuple[weakref.ref[DictConfig], tuple[tuple[str, DictConfig], ...]]] = {}
"""The model specs of each read-only config (a launch's composed jobs), walked once: the pre-flight asks 5 times."""


def spec_key_problems(cfg: DictConfig) -> list[str]:
    """One message per model spec with a key :class:`cts.llm.ModelSpec` does not take.

    A model file written before the litellm id was renamed ``model:`` -> ``id:`` gets a
    message naming the rename (instead of a ``TypeError`` when the spec is built).

    Returns:
        Problems such as ``clarifier.model: model mygpt: the litellm id is `id:` now ...``.
    """
    from dataclasses import fields

    from cts.compat.config import old_model_id_key
    from cts.llm import ModelSpec

    known = {f.name for f in fields(ModelSpec)}
    problems = []
    for path, node in find_model_specs(cfg):
        keys = {str(k): _get(node, str(k)) for k in node if not str(k).startswith("_")}
        if renamed := old_model_id_key(keys):
            problems.append(f"{path}: {renamed}")
        elif unknown := sorted(set(keys) - known):
            problems.append(f"{path} ({keys.get('name') or '?'}): unknown model file keys {unknown}")
    return problems


def spec_role(path: str) -> str:
    """The accounting role whose calls a model spec at ``path`` serves.

    ``search.summary_model`` is ``visit_summary``'s; the analyses' models are those of the role they
    stand in for (``robustness.judges.<name>.model``: ``judge``; ``robustness.backbones.<name>.ua.model``: ``ua``).
    """
    if path.endswith("summary_model"):
        return "visit_summary"
    parts = path.split(".")
    if parts[0] == "robustness" and len(parts) > 2:
        return "judge" if parts[1] == "judges" else parts[3] if len(parts) > 4 else parts[1]
    return parts[0]


def batch_problems(cfg: DictConfig, groups: Sequence[str] | None = None) -> list[str]:
    """One message per batched role that cannot be batched: an unknown role, or a model without a Batch API.

    A role's models are the model specs under its config node (``judge.members.*.model`` are the
    judge's; ``search.summary_model`` is ``visit_summary``'s). With ``services.llm.api_base`` every
    route is that server's, which then must speak OpenAI's Batch API.

    Args:
        cfg: A job's composed config.
        groups: The config keys whose models the job's task calls (None: every model spec).
    """
    roles = list(_value(OmegaConf.select(cfg, "services.llm.batch.roles", default=None)) or [])
    allowed = batch_roles()  # the declared stages' and aides' (search, visit_summary: the deep-search agent)
    problems = [
        f"services.llm.batch.roles: unknown role {role!r} (one of {', '.join(allowed)})"
        for role in roles
        if role not in allowed
    ]
    if not roles or _value(OmegaConf.select(cfg, "services.llm.api_base", default=None)):
        return problems
    for path, role, node in _role_specs(cfg):
        if groups is not None and path.split(".", 1)[0] not in groups:
            continue  # a model the task does not call (the default judge of a robustness analysis)
        if role in roles and _value(_get(node, "batch")) is None:
            name = _value(_get(node, "name")) or "?"
            own = "; the agent's own model, which summarises its visits without a search.summary_model"
            own = own if role != spec_role(path) else ""
            problems.append(
                f"services.llm.batch.roles has {role}, but {path} ({name}{own}) has no Batch API cts can reach "
                f"(no `batch:` in conf/model/{name}.yaml): take {role} out of the list or choose another model"
            )
    return problems


def _role_specs(cfg: DictConfig) -> list[tuple[str, str, DictConfig]]:
    """``(path, accounting role, node)`` of every model spec; the agent's model serves ``visit_summary`` too when
    no ``search.summary_model`` is set (the deep-search agent summarises its visits with its own model)."""
    specs = [(path, spec_role(path), node) for path, node in find_model_specs(cfg)]
    if not any(role == "visit_summary" for _, role, _ in specs) and _summarises(cfg):
        specs += [(path, "visit_summary", node) for path, role, node in specs if path == "search.model"]
    return specs


def _summarises(cfg: DictConfig) -> bool:
    """Whether the search component summarises its visits (its ``_target_`` takes a ``summary_model``)."""
    import inspect

    from hydra.utils import get_object

    target = _value(OmegaConf.select(cfg, "search._target_", default=None))
    try:
        return bool(target) and "summary_model" in inspect.signature(get_object(str(target))).parameters
    except (ImportError, AttributeError, ValueError, TypeError):
        return False  # an unloadable target: the unknown-key check names it


def preflight_problems(cfg: DictConfig) -> list[str]:
    """One message per model that cannot be reached as configured.

    A model is reachable when ``services.llm.api_base`` routes every role to one
    endpoint (or ``services.local_llm`` starts one), or when its key variable
    (``api_key_env``) is set, or, for keyless models, when it has an ``api_base``.

    Args:
        cfg: The composed config.

    Returns:
        Problems such as ``clarifier.model (gpt): OPENAI_API_KEY is not set``; empty when all is well.
    """
    if _value(OmegaConf.select(cfg, "services.llm.api_base", default=None)) or serves_locally(cfg):
        return []
    problems = []
    for path, node in find_model_specs(cfg):
        name = _value(_get(node, "name")) or "?"
        key_env, api_base = _value(_get(node, "api_key_env")), _value(_get(node, "api_base"))
        if key_env and not os.environ.get(key_env):
            problems.append(f"{path} ({name}): {key_env} is not set")
        elif not key_env and not api_base:
            env = _env_name(node, "api_base")
            hint = f"{env} is not set" if env else "no api_base and no key variable (set the model's api_base)"
            problems.append(f"{path} ({name}): {hint}")
    return problems


@dataclass(frozen=True)
class Endpoint:
    """One distinct endpoint of a sweep, with what uses it."""

    api_base: str
    api_key: str | None
    models: tuple[str, ...]
    """Model ids sent to it (after the ``services.llm`` overrides)."""
    roles: tuple[str, ...]
    """Config paths of the models that use it, e.g. ``clarifier.model``."""

    def describe(self) -> str:
        """``<api_base> (model m; used by clarifier.model, ua.model)``."""
        models = ", ".join(self.models)
        return f"{self.api_base} (model {models}; used by {', '.join(self.roles)})"


def endpoints_of(cfgs: Sequence[DictConfig]) -> list[Endpoint]:
    """Every distinct endpoint with an ``api_base`` that the jobs ``cfgs`` call.

    Args:
        cfgs: Composed job configs (already masked to the groups their task calls).

    Returns:
        One :class:`Endpoint` per (api_base, key), in first-use order; models whose key
        variable is missing are left to :func:`preflight_problems`.
    """
    from cts.llm import LLMSettings, ModelSpec, route_for

    found: dict[tuple[str, str | None], tuple[dict[str, None], dict[str, None]]] = {}
    for cfg in cfgs:
        if serves_locally(cfg):
            continue  # cts starts that server itself, with the job, and waits until it answers
        settings = LLMSettings.from_mapping(resolved(OmegaConf.select(cfg, "services.llm", default=None)) or {})
        for path, node in find_model_specs(cfg):
            spec = resolved(node)
            if spec is None:
                continue
            route = route_for(ModelSpec.coerce(spec), settings)
            if not route.api_base or route.missing_key:
                continue
            models, roles = found.setdefault((route.api_base, route.api_key), ({}, {}))
            models[route.model.split("/", 1)[-1] if route.model.startswith("openai/") else route.model] = None
            roles[path] = None
    return [Endpoint(base, key, tuple(m), tuple(r)) for (base, key), (m, r) in found.items()]


def probe(endpoint: Endpoint, timeout_s: float) -> str | None:
    """One ``GET {api_base}/models``; a problem message, or None when the endpoint answers.

    A refused connection, a DNS or TLS failure, no answer within ``timeout_s`` and a
    rejected key (401/403) are problems. Any other answer means the server is up (some
    servers have no ``/models``); a listing without the model is only logged, since
    gateways may serve aliases they do not list.
    """
    import httpx

    url = endpoint.api_base.rstrip("/") + "/models"
    headers = auth_headers(endpoint.models, endpoint.api_key)
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s, follow_redirects=True)
    except httpx.TimeoutException:
        return f"endpoint {endpoint.describe()}: no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return f"endpoint {endpoint.describe()}: unreachable ({type(exc).__name__}: {exc})"
    if response.status_code in (401, 403):
        return f"endpoint {endpoint.describe()}: the key was rejected (HTTP {response.status_code})"
    _warn_unlisted(endpoint, response)
    return None


_PROVIDER_AUTH = {
    # provider prefix -> how its API takes the key (the OpenAI-compatible default: a Bearer token)
    "gemini": lambda key: {"x-goog-api-key": key},
    "anthropic": lambda key: {"x-api-key": key, "anthropic-version": "2023-06-01"},
}


def auth_headers(models: Sequence[str], api_key: str | None) -> dict[str, str]:
    """The key as the endpoint's provider takes it (Gemini refuses a Bearer token as bad OAuth)."""
    if not api_key:
        return {}
    provider = next((m.split("/", 1)[0] for m in models if "/" in m), "openai")
    return _PROVIDER_AUTH.get(provider, lambda key: {"Authorization": f"Bearer {key}"})(api_key)


def probe_problems(endpoints: Sequence[Endpoint], timeout_s: float) -> list[str]:
    """Probe every endpoint once, in parallel (a dead one costs at most ``timeout_s``)."""
    if not endpoints:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(endpoints))) as pool:
        found = list(pool.map(lambda e: probe(e, timeout_s), endpoints))
    return [p for p in found if p is not None]


def _warn_unlisted(endpoint: Endpoint, response: Any) -> None:
    try:
        listed = {str(m.get("id")) for m in response.json().get("data") or [] if isinstance(m, dict)}
    except Exception:  # noqa: BLE001 - not a model listing: nothing to compare
        return
    missing = [m for m in endpoint.models if listed and m not in listed]
    if response.status_code == 200 and missing:
        log.warning(
            "endpoint %s does not list model(s) %s (it lists %s); calls may fail with 404",
            endpoint.api_base,
            missing,
            sorted(listed)[:10],
        )


def serves_locally(cfg: DictConfig) -> bool:
    """Whether the job starts its own LLM server (``services.local_llm``): nothing answers before the job.

    Every role calls that server (or ``services.llm.api_base``, e.g. a proxy in front of it), so no
    key is needed, and its readiness wait replaces the endpoint and completion probes.
    """
    return bool(OmegaConf.select(cfg, "services.local_llm._target_", default=None))


def resolved(node: Any) -> Any:
    """A config node as plain, resolved Python (None when it cannot be resolved here)."""
    if node is None:
        return None
    try:
        return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    except Exception:  # noqa: BLE001 - e.g. ${hydra:...} outside a Hydra run
        return None


def _walk(node: Any, path: str) -> Iterator[tuple[str, DictConfig]]:
    if isinstance(node, DictConfig):
        if _get(node, "_target_") == MODEL_SPEC_TARGET:
            yield path, node
            return
        for key in map(str, node):
            if key not in _SKIP or path:
                yield from _walk(_child(node, key), f"{path}.{key}" if path else key)
    elif isinstance(node, ListConfig):
        for i in range(len(node)):
            yield from _walk(_child(node, i), f"{path}[{i}]")


def _child(node: Any, key: Any) -> Any:
    # Interpolations like ${hydra:...} cannot resolve outside a Hydra run: skip them.
    try:
        return node[key]
    except Exception:  # noqa: BLE001
        return None


_ENV_INTERPOLATION = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)")


def _env_name(node: DictConfig, key: str) -> str | None:
    """The environment variable a value is read from (``${oc.env:VAR,...}``), if any."""
    raw = node._get_node(key)
    m = _ENV_INTERPOLATION.search(str(raw._value())) if raw is not None else None
    return m.group(1) if m else None


def _get(node: DictConfig, key: str) -> Any:
    try:
        return node.get(key)
    except Exception:  # noqa: BLE001 - unresolvable interpolation: treat as unset
        return None


def _value(value: Any) -> Any:
    """Treat empty strings and the string ``null`` (from env defaults) as unset."""
    return None if value in ("", "null", "None") else value
