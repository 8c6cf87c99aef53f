"""Start-up check: does any model of the config get a parameter its provider rejects?

Runs on the composed config before anything is instantiated (no litellm, no network).
Every node with ``_target_: cts.llm.ModelSpec`` (:func:`cts.compose.model_checks.find_model_specs`)
is checked against its own ``request:`` rules (:mod:`cts.llm._rules`) with the parameters
its calls would send, gathered from the config as the components read them:

* the model's own ``params`` (``clarifier.model.params``);
* for a spec under key ``model``, its parent's ``params`` and ``extra_params`` (a role's
  decoding overrides) and the parent's top-level sampling keys (``search.temperature``,
  ``search.top_p``, ``search.max_tokens`` of ``conf/search/webdancer.yaml``);
* for a spec under key ``<x>_model``, its parent's ``<x>_params`` (``search.summary_params``
  for ``search.summary_model``); a ``<x>_params`` without a ``<x>_model`` spec goes to
  ``model`` (the component falls back to it).

Later sources override earlier ones, as a call merges a role's params over the model's.
A config that routes every role to one server (``services.llm.api_base``) is not checked:
the providers whose rules these are are then not called.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cts.compose.model_checks import find_model_specs, resolved
from cts.llm import CAP_FIELDS, RequestRules, applied_params, rule_violations

log = logging.getLogger(__name__)

__all__ = ["SAMPLING_KEYS", "call_params", "rule_problems", "unapplied_params", "warn_unapplied_params"]

SAMPLING_KEYS: frozenset[str] = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "max_completion_tokens",
        "max_output_tokens",
        "stop",
        "seed",
        "n",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "logprobs",
        "top_logprobs",
        "reasoning_effort",
        "thinking",
        "enable_thinking",
        "response_format",
    }
)
"""Top-level keys of a component node that it sends as decoding parameters of its ``model``."""


def rule_problems(cfg: DictConfig) -> list[str]:
    """One message per parameter a model of ``cfg`` would send that its provider rejects.

    Args:
        cfg: The composed config (or the part of it the task calls).

    Returns:
        Messages such as ``clarifier.model (gpt): model gpt (openai/gpt-5.2) does not accept
        `temperature`: ... (https://...) [set in clarifier.model.params.temperature]``;
        empty when every request is acceptable.
    """
    if _plain(OmegaConf.select(cfg, "services.llm.api_base", default=None)):
        return []
    specs = find_model_specs(cfg)
    problems: list[str] = []
    for path, node in specs:
        spec = resolved(node)
        if not isinstance(spec, Mapping):
            continue
        rules = RequestRules.coerce(spec.get("request"))
        name, model = str(spec.get("name") or "?"), str(spec.get("id") or "?")
        params, origin = call_params(cfg, path, spec, {p for p, _ in specs})
        for (what, _rule), message in zip(rules.refused(params), rule_violations(name, model, rules, params)):
            where = ", ".join(origin[p] for p in _params_of(what) if p in origin)
            problems.append(f"{path} ({name}): {message} [set in {where}]")
    return problems


def unapplied_params(cfg: DictConfig) -> list[str]:
    """One line per parameter set in ``cfg`` that a model's request rules would not send as asked.

    A ``response_format`` on a model whose file says ``structured_output: none`` is dropped, one with a
    schema where only JSON mode is documented goes as ``json_object`` (the roles' own schemas are
    not config: they follow the rules silently, and the request audit shows what went out).
    """
    specs = find_model_specs(cfg)
    lines: list[str] = []
    for path, node in specs:
        spec = resolved(node)
        if not isinstance(spec, Mapping):
            continue
        params, origin = call_params(cfg, path, spec, {p for p, _ in specs})
        changes = applied_params(RequestRules.coerce(spec.get("request")), params, None).changes
        name = str(spec.get("name") or "?")
        for change in changes:
            key = change.split(" ", 1)[0]
            if key in CAP_FIELDS:  # a cap goes under the provider's name by design (request.cap_param)
                continue
            lines.append(f"{path} ({name}): {change} [set in {origin.get(key, key)}]")
    return lines


def warn_unapplied_params(cfgs: Sequence[DictConfig]) -> None:
    """Warn (on stderr, as the launch's other lines) once per requested parameter the jobs ``cfgs`` would not
    send as asked; the job's ``run.log`` gets it too."""
    for line in dict.fromkeys(line for cfg in cfgs for line in unapplied_params(cfg)):
        message = f"cts: WARNING: a requested parameter is not applied as asked: {line}"
        print(message, file=sys.stderr, flush=True)
        log.info("%s", message)


def call_params(
    cfg: DictConfig, path: str, spec: Mapping[str, Any], spec_paths: set[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The parameters the model at ``path`` is called with, and the config path of each.

    Args:
        cfg: The composed config.
        path: The spec's config path (``search.model``).
        spec: The spec node, resolved.
        spec_paths: Paths of every model spec of ``cfg`` (to route ``<x>_params``).
    """
    params: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for source, values in _sources(cfg, path, spec, spec_paths):
        for key, value in values.items():
            if value is not None:
                params[str(key)] = value
                origin[str(key)] = f"{source}.{key}" if source else str(key)
    return params, origin


def _sources(
    cfg: DictConfig, path: str, spec: Mapping[str, Any], spec_paths: set[str]
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    yield f"{path}.params", dict(spec.get("params") or {})
    parent_path, _, key = path.rpartition(".")
    parent = resolved(OmegaConf.select(cfg, parent_path, default=None)) if parent_path else None
    if not isinstance(parent, Mapping):
        return
    if key == "model":
        yield parent_path, {k: v for k, v in parent.items() if k in SAMPLING_KEYS}
        for own in ("params", "extra_params"):
            yield f"{parent_path}.{own}", _mapping(parent.get(own))
        for orphan in _orphan_params(parent, parent_path, spec_paths):
            yield f"{parent_path}.{orphan}", _mapping(parent.get(orphan))
    elif key.endswith("_model"):
        own = key[: -len("model")] + "params"
        yield f"{parent_path}.{own}", _mapping(parent.get(own))


def _orphan_params(parent: Mapping[str, Any], parent_path: str, spec_paths: set[str]) -> list[str]:
    """``<x>_params`` keys of ``parent`` with no ``<x>_model`` spec beside them."""
    return [
        k
        for k in parent
        if k.endswith("_params")
        and k != "extra_params"
        and f"{parent_path}.{k[: -len('params')]}model" not in spec_paths
    ]


def _params_of(what: str) -> list[str]:
    """The parameters named by a rule key (``temperature``, ``reasoning_effort=none``, ``a + b``)."""
    return [part.split("=", 1)[0].strip() for part in what.split("+")]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _plain(value: Any) -> Any:
    return None if value in ("", "null", "None") else value
