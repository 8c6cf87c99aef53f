"""The values a run is refused for before anything is created: one declarative table.

Every number a user can mistype is checked against :data:`RULES` (config path pattern,
what the value must be, why), so ``k=7``, ``concurrency=0`` or ``limit=-1`` end with one
``error:`` line each and exit 1 before the MLflow store, a run dir or a sweep dir exists,
instead of hanging, running unscored or slicing the dataset (the Hydra callback calls
:func:`cts.compose.app.check_start`). The places a run writes are checked by :mod:`cts.compose.checks`.
The default run dir ends in the process id (resolver ``cts_pid``), so runs started in the
same second never share it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from omegaconf import DictConfig, ListConfig, OmegaConf

__all__ = ["ORDERED", "RULES", "Rule", "compile_pattern", "register_resolvers", "value_problems"]

PID_RESOLVER = "cts_pid"


def register_resolvers() -> None:
    """Register ``${cts_pid:}`` (this process's id: the default run dir's suffix, see ``conf/config.yaml``)."""
    if not OmegaConf.has_resolver(PID_RESOLVER):
        OmegaConf.register_new_resolver(PID_RESOLVER, os.getpid)


register_resolvers()  # whoever composes a config that names the run dir has imported this module or run.py


@dataclass(frozen=True)
class Rule:
    """What the values at some config paths must be.

    Attributes:
        patterns: Dotted config paths; ``*`` is one key (a list index too), ``**`` any number of keys.
        check: True when a (resolved) value is acceptable.
        expect: What the value must be, as said in the message (``an integer >= 1``).
        why: What the key means, when the path does not say it.
    """

    patterns: tuple[str, ...]
    check: Callable[[Any], bool]
    expect: str
    why: str = ""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def integer(lo: int, hi: int | None = None, *, null: bool = False) -> tuple[Callable[[Any], bool], str]:
    """An integer in ``lo..hi`` (``hi`` None = no upper bound), or None when ``null``."""

    def check(v: Any) -> bool:
        return (null and v is None) or (_is_int(v) and v >= lo and (hi is None or v <= hi))

    text = f"an integer >= {lo}" if hi is None else f"an integer from {lo} to {hi}"
    return check, text + (" or null" if null else "")


def number(
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    null: bool = False,
) -> tuple[Callable[[Any], bool], str]:
    """A finite number within the given bounds, or None when ``null``."""
    bounds = [
        (">=", ge, lambda v, b: v >= b),
        (">", gt, lambda v, b: v > b),
        ("<=", le, lambda v, b: v <= b),
        ("<", lt, lambda v, b: v < b),
    ]
    used = [(op, b, f) for op, b, f in bounds if b is not None]

    def check(v: Any) -> bool:
        return (null and v is None) or (_is_num(v) and all(f(v, b) for _, b, f in used))

    text = "a number " + " and ".join(f"{op} {b:g}" for op, b, _ in used) if used else "a number"
    return check, text + (" or null" if null else "")


def one_of(*choices: Any) -> tuple[Callable[[Any], bool], str]:
    """One of ``choices`` (compared with ``==``, booleans only with booleans)."""

    def check(v: Any) -> bool:
        return any(type(v) is type(c) and v == c for c in choices)

    return check, "one of " + ", ".join(str(c).lower() if isinstance(c, bool) else str(c) for c in choices)


def rule(patterns: str | tuple[str, ...], kind: tuple[Callable[[Any], bool], str], why: str = "") -> Rule:
    """One table row: ``patterns`` must satisfy ``kind`` (from :func:`integer`, :func:`number`, :func:`one_of`)."""
    return Rule((patterns,) if isinstance(patterns, str) else patterns, kind[0], kind[1], why)


BOOL = one_of(True, False)
POSITIVE_S = number(gt=0)
FRACTION = number(ge=0, le=1)
LLM = "services.llm"
RULES: tuple[Rule, ...] = (
    rule("k", integer(1, 3), "the protocol's clarification budget"),
    rule("robustness.budgets.*", integer(1, 3), "k values of the source jobs"),
    rule("concurrency", integer(1), "instances in flight at once"),
    rule("limit", integer(1, null=True), "the first N instances; null = all"),
    rule("seed", integer(0)),
    rule("repeats", integer(1), "runs of each instance (repeat 0 keeps the cache keys of a single run)"),
    rule(
        "repeat_temperature",
        number(ge=0, null=True),
        "temperature of every LLM role past repeat 0; null = each model's",
    ),
    rule("bootstrap.n_resamples", integer(1), "bootstrap resamples"),
    rule("bootstrap.confidence", number(gt=0, lt=1), "confidence level of the intervals"),
    rule(("sweep_report", "debug"), BOOL),
    rule(
        "hydra.launcher.job_concurrency", integer(1, null=True), "instances in flight per job; null keeps concurrency"
    ),
    rule("hydra.launcher.progress", BOOL),
    rule(
        tuple(f"hydra.launcher.{k}" for k in ("timeout_min", "array_parallelism", "nodes", "tasks_per_node")),
        integer(1),
    ),
    # null is hydra-submitit-launcher's own default (submitit_local, submitit_slurm): the cluster's default.
    rule(
        tuple(f"hydra.launcher.{k}" for k in ("cpus_per_task", "gpus_per_node", "gpus_per_task", "cpus_per_gpu")),
        integer(1, null=True),
        "null = the cluster's default",
    ),
    rule("hydra.launcher.mem_gb", number(gt=0, null=True), "null = the cluster's default"),
    rule(("hydra.launcher.max_num_timeout", "hydra.launcher.signal_delay_s", "hydra.launcher.verbose"), integer(0)),
    Rule(("hydra.launcher.n_jobs",), lambda v: _is_int(v) and v != 0, "an integer other than 0", "-1 = every CPU"),
    rule(f"{LLM}.spend.max_usd", number(gt=0, null=True), "USD a job dir may spend; null = no cap"),
    rule(("plan", "plan.enabled", "plan.calibration", f"{LLM}.spend.allow_over_forecast"), BOOL),
    rule("plan.calibration_n", integer(1), "instances of each job in the calibration slice"),
    rule("plan.then", one_of("run", "stop"), "what follows the forecast; plan=only is plan.then=stop"),
    rule("plan.confidence", number(gt=0, lt=1), "of the forecast's intervals"),
    rule(f"{LLM}.concurrency_per_endpoint", integer(1), "calls in flight per endpoint"),
    rule((f"{LLM}.adaptive.floor", f"{LLM}.adaptive.initial"), integer(1)),
    rule(f"{LLM}.adaptive.decrease", number(gt=0, lt=1), "factor applied to the calls in flight on a 429"),
    rule((f"{LLM}.adaptive.enabled", f"{LLM}.tracing", f"{LLM}.preflight_probe", f"{LLM}.preflight_completion"), BOOL),
    rule(f"{LLM}.backoff.*", number(ge=0), "seconds"),
    rule(f"{LLM}.breaker_failures", integer(0, null=True), "0 = never stop"),
    rule("services.local_llm.n_ctx", integer(256), "tokens of prompt + reply"),
    rule("services.local_llm.n_threads", integer(1, null=True), "CPU threads; null = every core"),
    rule("services.local_llm.seed", integer(0)),
    rule("services.local_llm.port", integer(1, null=True), "null = a free loopback port"),
    rule(("services.local_llm.startup_timeout_s", "services.local_llm.stop_timeout_s"), POSITIVE_S, "seconds"),
    rule(f"{LLM}.breaker_timeouts", integer(0, null=True), "timeouts in a row that stop the job; 0 = never"),
    rule(f"{LLM}.max_timeout_attempts", integer(1), "tries of a call that keeps timing out"),
    rule(f"{LLM}.rate_limit_wait_s", number(ge=0), "seconds of 429 waits a call may spend"),
    rule(f"{LLM}.role_timeout_s.*", number(gt=0, null=True), "seconds; null = services.llm.timeout_s"),
    rule(f"{LLM}.preflight_timeout_s", POSITIVE_S, "seconds"),
    rule(f"{LLM}.cache.mode", one_of("read_write", "read_only", "off")),
    rule(f"{LLM}.transport", one_of("openai", "litellm")),
    rule(f"{LLM}.max_reasks", integer(0), "re-asks after invalid role output"),
    rule("**.timeout_s", POSITIVE_S, "seconds"),
    rule("**.max_attempts", integer(1), "tries per call, the first included"),
    rule("**.max_reasks", integer(0, null=True), "re-asks after invalid output"),
    rule("**.backoff_s", number(ge=0), "seconds"),
    rule(("**.input_cost_per_token", "**.output_cost_per_token"), number(ge=0), "USD per token"),
    rule(("**.max_concurrency", "**.min_concurrency"), integer(1, null=True)),
    rule(("**.params.temperature", "search.temperature", "search.summary_params.temperature"), number(ge=0)),
    rule(("**.params.top_p", "search.top_p"), number(gt=0, le=1)),
    rule(
        ("**.params.max_tokens", "search.max_tokens", "**.max_output_tokens", "**.summary_max_output_tokens"),
        integer(1, null=True),
        "tokens a reply may hold",
    ),
    rule("**.request.reasoning_allowance", integer(0), "reasoning tokens a reply may add to its cap"),
    rule("search.max_truncated_turns", integer(0), "cut turns in a row before the arm is truncated"),
    rule(
        (
            "search.max_llm_calls",
            "search.max_context_tokens",
            "search.results_per_query",
            "search.max_queries_per_call",
            "search.max_page_chars",
            "search.top_k",
            "search.max_chars",
            "**.provider.snippet_chars",
            "**.fetcher.**.max_bytes",
        ),
        integer(1),
    ),
    rule("search.max_urls_per_call", integer(1, null=True)),
    rule("search.fallback_page_chars", integer(0)),
    rule(
        (
            "judge.full",
            "judge.partial",
            "**.judges.*.full",
            "**.judges.*.partial",
            "judge.members.*.full",
            "judge.members.*.partial",
        ),
        number(gt=0, le=1),
        "share of a nugget's content tokens in the answer",
    ),
    rule(("extractor.max_nuggets", "extractor.max_docs", "extractor.min_tokens"), integer(1)),
    rule("extractor.support", FRACTION),
    rule("extractor.weights.*", integer(1, 3), "nugget weights are 1, 2 or 3"),
    rule("gate.min_confidence", FRACTION),
    rule(("gate.max_tokens", "gate.min_titles"), integer(0)),
    rule("clarifier.mode", one_of("batch", "sequential")),
    rule("clarifier.stop_early", BOOL),
    rule("dataset.n", integer(1), "demo instances"),
    rule("dataset.seed", integer(0)),
    rule("dataset.max_field_chars", integer(1)),
    rule("dataset.only_with_gold", BOOL),
    Rule(
        ("dataset.cluster_field",),
        lambda v: v is None or (isinstance(v, str) and bool(v.strip())),
        "a meta key (a non-empty string) or null",
        "each instance's cluster, e.g. its topic",
    ),
)
"""The value table: every numeric (and a few enumerated) settings of ``conf/``, wherever they are mounted."""

ORDERED: tuple[tuple[str, str, str], ...] = (
    ("judge", "partial", "full"),
    ("**.judges.*", "partial", "full"),
    (f"{LLM}.backoff", "initial", "max"),
)
"""Sibling keys whose values must not cross: ``(parent pattern, low, high)`` means ``low <= high``."""


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A regex of a dotted path pattern: ``*`` is one key, ``**`` any number of keys (none too)."""
    parts = pattern.split(".")
    out = []
    for i, part in enumerate(parts):
        dot = r"\." if i < len(parts) - 1 else ""
        out.append(r"(?:[^.]+\.)*" if part == "**" else (r"[^.]+" if part == "*" else re.escape(part)) + dot)
    return re.compile("".join(out) + "$")


Compiled = list[tuple[re.Pattern[str], Rule]]


def _index(rules: Sequence[Rule]) -> tuple[dict[str, Compiled], Compiled]:
    """The rules by their pattern's last key (most patterns end in one), and those ending in a wildcard."""
    by_key: dict[str, Compiled] = {}
    wild: Compiled = []
    for r in rules:
        for p in r.patterns:
            last = p.rsplit(".", 1)[-1]
            (wild if "*" in last else by_key.setdefault(last, [])).append((compile_pattern(p), r))
    return by_key, wild


_BY_KEY, _WILD = _index(RULES)
_ORDERED = tuple((compile_pattern(f"{parent}.{low}"), low, high) for parent, low, high in ORDERED)


def leaves(node: DictConfig | ListConfig, prefix: str = "") -> Iterator[tuple[str, DictConfig | ListConfig, Any]]:
    """Every leaf of a config tree as ``(dotted path, parent node, key)``, without resolving anything."""
    keys: Iterable[Any] = list(node.keys()) if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        child = node._get_node(key)
        if _is_branch(child):
            yield from leaves(child, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", node, key


def _is_branch(node: Any) -> TypeGuard[DictConfig | ListConfig]:
    return isinstance(node, (DictConfig, ListConfig)) and not (
        node._is_none() or node._is_missing() or node._is_interpolation()
    )


def _value(parent: DictConfig | ListConfig, key: Any) -> tuple[bool, Any]:
    """``(True, value)`` when the leaf resolves; ``(False, None)`` when it is ``???`` or fails (reported elsewhere)."""
    if isinstance(parent, DictConfig) and OmegaConf.is_missing(parent, key):
        return False, None
    try:
        value = parent[key]
        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value, resolve=True)
    except Exception:  # noqa: BLE001 - an unset env var or a ${hydra:} outside Hydra: input_errors says so
        return False, None
    return True, value


def value_problems(cfg: DictConfig) -> list[str]:
    """One ``path: must be ..., got ...`` line per value of ``cfg`` that :data:`RULES` or :data:`ORDERED` refuses."""
    problems: dict[str, str] = {}
    values: dict[str, Any] = {}
    for path, parent, key in _checked_leaves(cfg):
        rules = [r for pattern, r in (*_BY_KEY.get(str(key), ()), *_WILD) if pattern.match(path)]
        ok, value = _value(parent, key) if rules else (False, None)
        if not ok:
            continue
        values[path] = value
        failed = next((r for r in rules if not r.check(value)), None)
        if failed is not None:
            why = f" ({failed.why})" if failed.why else ""
            problems[path] = f"{path}: must be {failed.expect}{why}, got {_shown(value)}"
    for path, value in values.items():
        for pattern, low, high in _ORDERED:
            other = path[: -len(low)] + high
            if (
                pattern.match(path)
                and other in values
                and not ({path, other} & set(problems))
                and _is_num(value)
                and _is_num(values[other])
                and value > values[other]
            ):
                problems[path] = f"{path}: must be <= {other} ({_shown(values[other])}), got {_shown(value)}"
    return list(problems.values())


def _checked_leaves(cfg: DictConfig) -> Iterator[tuple[str, DictConfig | ListConfig, Any]]:
    """Leaves outside ``hydra``, plus those of ``hydra.launcher`` (the only Hydra settings in the table)."""
    for key in [str(k) for k in cfg if k != "hydra"]:
        if _is_branch(node := cfg._get_node(key)):
            yield from leaves(node, f"{key}.")
        else:
            yield str(key), cfg, key
    launcher = OmegaConf.select(cfg, "hydra.launcher", default=None)
    if isinstance(launcher, DictConfig):
        yield from leaves(launcher, "hydra.launcher.")


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)
