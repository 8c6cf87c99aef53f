"""The schema of the top of the config: the run's own keys, ``services``, ``bootstrap``, ``plan``, ``tracking``.

Each dataclass is one node of ``conf/``; its fields are declared with :func:`~._keys.key`
(meaning, default, bounds, protocol or operational). The yaml Hydra composes holds the same
defaults (tests/compose/test_defaults.py compares them; ``python -m cts.compose.schema`` writes a
missing one) and the library's settings read theirs from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from cts.compose.schema._components import K_MAX, K_MIN, Clarifier, Dataset, Extractor, Gate, Judge, Robustness, Search
from cts.compose.schema._keys import key, one_of
from cts.core.stages import role_timeouts


@dataclass(frozen=True, kw_only=True)
class Bootstrap:
    """``bootstrap``: the bootstrap intervals of summaries, reports and gating."""

    n_resamples: int = key("bootstrap resamples", 10_000, ge=1)
    confidence: float = key("confidence level of the intervals", 0.95, gt=0, lt=1)


@dataclass(frozen=True, kw_only=True)
class JudgeAnchors:
    """``judge_anchors``: the anchor probes of an LLM judge at the pre-flight (:mod:`cts.compose.anchor_check`)."""

    check: bool = key("probe an LLM judge's anchors before the jobs", True, protocol=False)
    instances: int = key("instances probed (two judge calls each)", 3, protocol=False, ge=1)
    empty_max: float = key("restore_score_100 an empty answer may get", 10.0, protocol=False, ge=0, le=100)
    gold_min: float = key("restore_score_100 the gold nuggets' own text must get", 90.0, protocol=False, ge=0, le=100)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """``plan``: the forecast of a sweep's calls, tokens, USD and time before it runs (``plan=true``)."""

    enabled: bool = key("plan=true stands for plan.enabled=true", False, protocol=False)
    then: Literal["run", "stop"] = key("what follows the forecast; plan=only is plan.then=stop", "run", protocol=False)
    calibration_n: int = key("instances of each job in the calibration slice", 5, protocol=False, ge=1)
    confidence: float = key("of the forecast's intervals", 0.95, protocol=False, gt=0, lt=1)
    source: str | None = key("a sweep dir of an earlier run read instead of a slice", None, protocol=False)
    calibration: bool = key("set on the calibration slice's own command line, never by hand", False, protocol=False)


@dataclass(frozen=True, kw_only=True)
class Tracking:
    """``tracking``: where and how MLflow records the runs."""

    uri: str = key("the MLflow tracking URI", "sqlite:///${paths.output_root}/mlflow.db", protocol=False)
    experiment: str = key("the MLflow experiment of the runs", "cts", protocol=False)
    instance_traces: bool = key("one MLflow trace per instance", True, protocol=False)
    records_table: bool = key("the records as an MLflow table", True, protocol=False)
    evaluation_dataset: bool = key("the dataset as an MLflow evaluation dataset", True, protocol=False)
    experiment_kind: str = key("mlflow.experimentKind of a new experiment", "genai_development", protocol=False)


@dataclass(frozen=True, kw_only=True)
class Adaptive:
    """``services.llm.adaptive``: the per-endpoint limit of calls in flight (AIMD)."""

    enabled: bool = key("false = a fixed limit at concurrency_per_endpoint", True, protocol=False)
    floor: int = key("the lowest limit (a model's min_concurrency wins)", 1, protocol=False, ge=1)
    initial: int = key("the limit at the start", 16, protocol=False, ge=1)
    decrease: float = key("factor applied to the calls in flight on a 429", 0.9, protocol=False, gt=0, lt=1)


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """``services.llm.backoff``: the waits between retries, in seconds."""

    initial: float = key("seconds of the first wait", 1.0, protocol=False, ge=0)
    max: float = key("seconds of the longest wait", 30.0, protocol=False, ge=0)
    jitter: float = key("seconds added at random to every wait", 1.0, protocol=False, ge=0)
    max_retry_after: float = key("seconds of a Retry-After that are honoured", 60.0, protocol=False, ge=0)

    ORDER = (("initial", "max"),)


@dataclass(frozen=True, kw_only=True)
class Cache:
    """``services.llm.cache``: the content-addressed response cache."""

    mode: Literal["read_write", "read_only", "off"] = key("how calls use the cache", "read_write", protocol=False)
    path: str | None = key("the SQLite file; null = <paths.cache_dir>/llm_cache.sqlite", None, protocol=False)
    url: str | None = key("a database URL instead of the file (jobs on several nodes)", None, protocol=False)


@dataclass(frozen=True, kw_only=True)
class Spend:
    """``services.llm.spend``: the USD cap of a job dir."""

    max_usd: float | None = key("USD a job dir may spend; null = no cap", None, protocol=False, gt=0)
    allow_over_forecast: bool = key("with plan=true, run a sweep forecast above max_usd", False, protocol=False)


@dataclass(frozen=True, kw_only=True)
class Price:
    """``services.llm.api_base_price``: USD per token on ``api_base``."""

    input_cost_per_token: float = key("USD per token", 0.0, protocol=False, ge=0)
    output_cost_per_token: float = key("USD per token", 0.0, protocol=False, ge=0)


@dataclass(frozen=True, kw_only=True)
class Batch:
    """``services.llm.batch``: the roles sent through Batch APIs (:mod:`cts.llm.batch`)."""

    roles: list[str] = key("accounting roles whose requests are batched", [], protocol=False)
    max_requests: int = key("requests of a batch that send it", 1000, protocol=False, ge=1, le=50000)
    max_wait_s: float = key(
        "seconds the oldest queued request waits before its batch is sent", 5.0, protocol=False, ge=0
    )
    poll_s: float = key("seconds between status polls of a batch", 30.0, protocol=False, gt=0)
    max_submissions: int = key(
        "sendings of one request before it is an infrastructure failure (a rerun sends it again)",
        3,
        protocol=False,
        ge=1,
    )
    window: Literal["24h"] = key("the completion window asked for", "24h", protocol=False)
    dir: str | None = key("the ledger's dir; null = the sweep's dir", None, protocol=False)
    transient_budget_s: float = key(
        "seconds a Batch API step rides out connection failures, 429s and 5xx before it fails",
        300.0,
        protocol=False,
        ge=0,
    )


_ROLE_TIMEOUT_S = role_timeouts()  # each role's default, declared with its stage (cts.core.stages)


@dataclass(frozen=True, kw_only=True)
class LLM:
    """``services.llm``: the LLM runtime every role's client shares (``conf/llm/default.yaml``)."""

    cache: Cache = key("the response cache", Cache, protocol=False)
    api_base: str | None = key("one OpenAI-compatible endpoint for every role's model", None)
    api_key: str | None = key("the key sent to api_base", None)
    served_name: str | None = key("the model name sent to api_base", None)
    api_base_price: Price = key("USD per token on api_base", Price, protocol=False)
    concurrency_per_endpoint: int = key("calls in flight per endpoint", 64, protocol=False, ge=1)
    adaptive: Adaptive = key("the adaptive per-endpoint limit", Adaptive, protocol=False)
    timeout_s: float = key("seconds a request may take before it counts as timed out", 120.0, protocol=False, gt=0)
    role_timeout_s: dict[str, float | None] = key(
        "seconds; null = services.llm.timeout_s", _ROLE_TIMEOUT_S, protocol=False, gt=0
    )
    max_attempts: int = key("tries per call, the first included", 6, protocol=False, ge=1)
    max_timeout_attempts: int = key("tries of a call that keeps timing out", 2, protocol=False, ge=1)
    rate_limit_wait_s: float = key("seconds of 429 waits a call may spend", 300.0, protocol=False, ge=0)
    backoff: Backoff = key("the waits between retries", Backoff, protocol=False)
    max_reasks: int = key("re-asks after invalid role output", 2, ge=0)
    spend: Spend = key("the USD cap", Spend, protocol=False)
    tracing: bool = key("the per-call tracing hook", False, protocol=False)
    transport: Literal["openai", "litellm"] = key(
        "how requests to OpenAI-compatible endpoints go", "openai", protocol=False
    )
    breaker_failures: int | None = key("0 = never stop", 20, protocol=False, ge=0)
    breaker_timeouts: int | None = key("timeouts in a row that stop the job; 0 = never", 8, protocol=False, ge=0)
    preflight_probe: bool = key("GET {api_base}/models once per endpoint before the jobs", True, protocol=False)
    preflight_timeout_s: float = key("seconds a pre-flight probe may take", 5.0, protocol=False, gt=0)
    preflight_completion: bool = key("one minimal completion per model and endpoint first", True, protocol=False)
    batch: Batch = key("roles sent through the providers' Batch APIs", Batch, protocol=False)


@dataclass(frozen=True, kw_only=True)
class LocalLLM:
    """``services.local_llm``: a llama.cpp server cts starts for each job (``experiment=local_llm``)."""

    n_ctx: int = key("tokens of prompt + reply", 8192, ge=256)
    n_threads: int | None = key("CPU threads; null = every core", 1, ge=1)
    seed: int = key("the server's sampling seed", 0, ge=0)
    port: int | None = key("null = a free loopback port", None, protocol=False, ge=1)
    startup_timeout_s: float = key("seconds the server may take to answer after its start", 120.0, protocol=False, gt=0)
    stop_timeout_s: float = key("seconds between SIGTERM and SIGKILL", 10.0, protocol=False, gt=0)
    extra_buffers: bool = key("llama.cpp's extra weight buffers (repacking, AMX); false = plain CPU buffers", False)


@dataclass(frozen=True, kw_only=True)
class Services:
    """``services``: what every job shares (the LLM runtime, the corpus, a local server)."""

    corpus_lang: str = key("the offline corpus's language", "en-us")
    llm: LLM = key("the LLM runtime", LLM)
    local_llm: LocalLLM | None = key(
        "a local LLM server for each job (absent unless local_llm= or experiment=local_llm)", None
    )


_PLAN = one_of(True, False)  # plan=true is a bool where the node was


@dataclass(frozen=True, kw_only=True)
class Config:
    """The composed config of a job (``conf/config.yaml`` and its groups)."""

    k: int = key("the protocol's clarification budget", 1, ge=K_MIN, le=K_MAX)
    seed: int = key("the seed of the bootstrap intervals", 0, ge=0)
    concurrency: int = key("instances in flight at once", 8, protocol=False, ge=1)
    limit: int | None = key("the first N instances; null = all", None, protocol=False, ge=1)
    repeats: int = key("runs of each instance (repeat 0 keeps the cache keys of a single run)", 1, protocol=False, ge=1)
    repeat_temperature: float | None = key(
        "temperature of every LLM role past repeat 0; null = each model's", None, ge=0, omit_at=None
    )
    repeat_stages: list[str] | None = key("stages a repeat re-samples; null = all", None, omit_at=None)
    arms: list[str] = key("attribution arms beside orig and clarified", [], omit_at=[])
    sweep_report: bool = key("build the paper-style report at the end of a multirun", True, protocol=False)
    min_scored: float | None = key(
        "share of a job's scores it must measure, else exit 3; none measured always fails; null = no check",
        0.0,
        protocol=False,
        ge=0,
        le=1,
    )
    debug: bool = key("bad input ends with its traceback", False, protocol=False)
    services: Services = key("the shared services", Services)
    bootstrap: Bootstrap = key("the bootstrap settings", Bootstrap)
    judge_anchors: JudgeAnchors = key("the judge's anchor check at the pre-flight", JudgeAnchors, protocol=False)
    plan: Plan = key("plan before you pay", Plan, protocol=False, check=_PLAN)
    tracking: Tracking = key("the MLflow settings", Tracking, protocol=False)
    paths: Any = key("where inputs, outputs and caches are", protocol=False)
    task: Any = key("what a job does (its _target_ names the task)", protocol=False)
    hydra: Any = key("Hydra's own settings", protocol=False)
    dataset: Dataset = key("the instances")
    clarifier: Clarifier = key("the clarifier role")
    ua: Any = key("the simulated user's role")
    rewriter: Any = key("the rewriter role")
    search: Search = key("the deep search")
    judge: Judge = key("the coverage judge")
    extractor: Extractor = key("the nugget extractor")
    qtyper: Any = key("the question typer")
    gate: Gate = key("the ask-or-not gate, applied after the fact over finished records", protocol=False)
    robustness: Robustness = key("the robustness analyses' settings")


CLOSED: tuple[type, ...] = (
    Config,
    Bootstrap,
    Plan,
    Tracking,
    Services,
    LLM,
    Adaptive,
    Backoff,
    Cache,
    Spend,
    Price,
    Batch,
)
"""Schemas that declare every key of their node: a ``+key`` appended there that they lack is a typo.

The others (a model's ``params``, a preset's ``robustness``, the components) take keys no schema lists.
"""
