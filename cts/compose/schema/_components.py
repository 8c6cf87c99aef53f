"""The schema of the swappable parts: the keys their options share, wherever they are mounted.

A group's options (``search=webdancer``, ``search=extractive``) hold different keys: a
component's schema is the union of the keys cts checks or reads from the config, and a key
no schema declares takes any value and is part of the protocol. The keys of a model spec,
of a provider or a fetcher mean the same wherever they are bound (``clarifier.model``,
``search.summary_model``): their schemas are mounted at ``**`` patterns (see ``MOUNTS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cts.compose.schema._keys import Check, key

K_MIN, K_MAX = 1, 3
"""The protocol's clarification budgets ``k``: 1, 2 or 3 (the paper's), the one bound of ``k`` and of budgets."""

_NON_ZERO = Check(lambda v: isinstance(v, int) and not isinstance(v, bool) and v != 0, "an integer other than 0")
_NAMED = Check(
    lambda v: v is None or (isinstance(v, str) and bool(v.strip())), "a meta key (a non-empty string) or null"
)


@dataclass(frozen=True)
class Params:
    """``**.params`` (a model's decoding params) and ``search.summary_params``."""

    temperature: float = key("sampling temperature", ge=0)
    top_p: float = key("nucleus sampling mass", gt=0, le=1)
    max_tokens: int | None = key("tokens a reply may hold", ge=1)


@dataclass(frozen=True)
class Request:
    """``**.request``: a provider's documented rules of a model (:mod:`cts.compose.request_rules`)."""

    reasoning_allowance: int = key("reasoning tokens a reply may add to its cap", ge=0)


@dataclass(frozen=True)
class Provider:
    """``**.provider``: a search provider."""

    snippet_chars: int = key("characters of a hit's snippet", ge=1)


@dataclass(frozen=True)
class Fetcher:
    """``**.fetcher.**``: a page fetcher (and its routes)."""

    max_bytes: int = key("bytes of a page read", ge=1)


@dataclass(frozen=True)
class Anywhere:
    """Keys that mean the same in every node that has them (``**``): model specs, providers, fetchers, roles."""

    timeout_s: float = key("seconds a call may take", gt=0)
    max_attempts: int = key("tries per call, the first included", ge=1)
    max_reasks: int | None = key("re-asks after invalid output", ge=0)
    backoff_s: float = key("seconds of the first wait between tries", ge=0)
    input_cost_per_token: float = key("USD per token", ge=0)
    output_cost_per_token: float = key("USD per token", ge=0)
    max_concurrency: int | None = key("calls in flight to this model", ge=1)
    min_concurrency: int | None = key("the adaptive limit's floor for this model", ge=1)
    max_output_tokens: int | None = key("tokens a reply may hold", ge=1)
    summary_max_output_tokens: int | None = key("tokens a reply may hold", ge=1)
    batch: dict | None = key("a model's Batch API and its batch prices (cts.llm.batch)", protocol=False)


@dataclass(frozen=True)
class Search:
    """``search``: the deep search (``search=webdancer``, ``search=extractive``)."""

    temperature: float = key("agent sampling temperature", ge=0)
    top_p: float = key("agent nucleus sampling mass", gt=0, le=1)
    summary_params: Params = key("decoding params of the visit summariser")
    max_truncated_turns: int = key("cut turns in a row before the arm is truncated", ge=0)
    max_llm_calls: int = key("agent turns per run", ge=1)
    max_context_tokens: int = key("conversation tokens before the final answer is forced", ge=1)
    results_per_query: int = key("search hits per query", ge=1)
    max_queries_per_call: int = key("queries of one search call that are run", ge=1)
    max_urls_per_call: int | None = key("urls of one visit call that are read; null = all", ge=1)
    max_page_chars: int = key("page characters handed to the summariser", ge=1)
    fallback_page_chars: int = key("page characters returned when no summary can be extracted", ge=0)
    top_k: int = key("passages of the extractive answer", ge=1)
    max_chars: int = key("characters of the extractive answer", ge=1)


@dataclass(frozen=True)
class Judge:
    """``judge``, a panel's members and a robustness analysis's judges: lexical thresholds."""

    full: float = key("share of a nugget's content tokens in the answer", gt=0, le=1)
    partial: float = key("share of a nugget's content tokens in the answer", gt=0, le=1)

    ORDER = (("partial", "full"),)


@dataclass(frozen=True)
class Extractor:
    """``extractor``: the nugget extractor of the gold build."""

    max_nuggets: int = key("nuggets per gold", ge=1)
    max_docs: int = key("documents sentences are taken from", ge=1)
    min_tokens: int = key("content tokens a fragment needs", ge=1)
    support: float = key("share of an answer sentence's tokens a document must hold", ge=0, le=1)
    weights: list[int] = key("nugget weights are 1, 2 or 3", ge=1, le=3)


@dataclass(frozen=True)
class Gate:
    """``gate``: the ask-or-not gate."""

    min_confidence: float = key("the model's confidence an ask needs", ge=0, le=1)
    max_tokens: int = key("content tokens of a query that is asked about", ge=0)
    min_titles: int = key("corpus titles sharing the head term for an ask", ge=0)


@dataclass(frozen=True)
class Clarifier:
    """``clarifier``: the role that asks the questions."""

    mode: Literal["batch", "sequential"] = key("k questions at once, or one per turn")
    stop_early: bool = key("sequential only: the clarifier may stop when the answers suffice")


@dataclass(frozen=True)
class Dataset:
    """``dataset``: the instances."""

    n: int = key("demo instances", ge=1)
    seed: int = key("the demo set's seed", ge=0)
    max_field_chars: int = key("characters of an id or query value", ge=1)
    only_with_gold: bool = key("evaluate only the instances that have gold")
    cluster_field: str | None = key("each instance's cluster, e.g. its topic", protocol=False, check=_NAMED)


@dataclass(frozen=True)
class Robustness:
    """``robustness``: the analyses of finished sweeps (Tables 9 and 11)."""

    budgets: list[int] | None = key("k values of the source jobs", ge=K_MIN, le=K_MAX)


@dataclass(frozen=True)
class Launcher:
    """``hydra.launcher``: the launcher's settings (cts, joblib, submitit)."""

    job_concurrency: int | None = key("instances in flight per job; null keeps concurrency", protocol=False, ge=1)
    progress: bool = key("one progress bar for the sweep", protocol=False)
    timeout_min: int = key("minutes a job may run", protocol=False, ge=1)
    array_parallelism: int = key("jobs of the sweep running at once", protocol=False, ge=1)
    nodes: int = key("nodes per job", protocol=False, ge=1)
    tasks_per_node: int = key("tasks per node", protocol=False, ge=1)
    cpus_per_task: int | None = key("null = the cluster's default", protocol=False, ge=1)
    gpus_per_node: int | None = key("null = the cluster's default", protocol=False, ge=1)
    gpus_per_task: int | None = key("null = the cluster's default", protocol=False, ge=1)
    cpus_per_gpu: int | None = key("null = the cluster's default", protocol=False, ge=1)
    mem_gb: float | None = key("null = the cluster's default", protocol=False, gt=0)
    max_num_timeout: int = key("requeues of a job cut off by its time limit", protocol=False, ge=0)
    signal_delay_s: int = key("seconds between the signal and the time limit", protocol=False, ge=0)
    verbose: int = key("joblib's verbosity", protocol=False, ge=0)
    n_jobs: int = key("-1 = every CPU", protocol=False, check=_NON_ZERO)


MOUNTS_OF_COMPONENTS: tuple[tuple[str, type], ...] = (
    ("hydra.launcher", Launcher),
    ("judge.members.*", Judge),
    ("**.judges.*", Judge),
    ("**.params", Params),
    ("**.request", Request),
    ("**.provider", Provider),
    ("**.fetcher.**", Fetcher),
    ("**", Anywhere),
)
"""Schemas bound at patterns rather than one path (the root :class:`~._run.Config` is mounted at ``""``)."""
