"""The pipeline's stages and roles, each declared once; every other list of them derives from :func:`stages`.

A :class:`Stage` is one step of the protocol (clarify, answer, rewrite, search, judge): its
role (the config group ``clarifier=<option>`` and the accounting role of its calls), the
role Protocol method the pipeline calls and the parameters it receives (what the role may
see: the leakage guard), its prompt and the prompt's placeholders, its output, its trace
span, whether its failures show in the unscored table, whether its calls can go through a
Batch API, and what the planner and the report read of it. An :class:`Aide` is a role that
serves a stage without being one (the question typer, the visit summariser ...).

A new stage is a class and one :func:`register` call: a stage registered ``before="search"``
refines the query the clarified arm searches (``sees=("query",)``, returns the new query).
Nothing here imports a role: targets and Protocols are dotted names, so the Hydra plugin
reads this module without importing the library.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class Stage:
    """One declared stage of the protocol.

    Attributes:
        name: The stage's name in records (``error.stage``) and in ``repeat_stages``'s role terms.
        role: Its role: the config group of its component and the accounting role of its calls.
        protocol: Dotted name of the role Protocol (in :mod:`cts.core.contracts` for the built-in ones).
        method: The Protocol method the pipeline calls.
        sees: The parameters ``method`` receives, in order: all the role may see.
        output: What it returns (a name of the record field or value it fills).
        prompt: ``prompts/<prompt>.md`` of its LLM role (None: no LLM role).
        placeholders: The prompt's ``{fields}`` (the LLM role's view of ``sees``).
        node: The Hydra node every model plays the role with (``_target_``, output cap ...), or empty.
        span: Its span in the per-instance trace.
        span_type: The MLflow span type of that span.
        batchable: Whether ``services.llm.batch.roles`` may name its role.
        unscored: Whether its failures have a row in the unscored table.
        interaction: Part of the clarification: its failure leaves no clarified arm, and its
            spend is on the cost axis of the report's frontier.
        per_turn: Runs once per turn in sequential mode (the planner's round trips).
        on_arm: Runs on every searched arm (the planner counts it once per arm).
        timeout_s: Its calls' default request timeout (``services.llm.role_timeout_s``; None: ``timeout_s``).
    """

    name: str
    role: str
    protocol: str
    method: str
    sees: tuple[str, ...]
    output: str
    prompt: str | None = None
    placeholders: tuple[str, ...] = ()
    node: Mapping[str, Any] = field(default_factory=dict)
    span: str = ""
    span_type: str = "LLM"
    batchable: bool = True
    unscored: bool = True
    interaction: bool = False
    per_turn: bool = False
    on_arm: bool = False
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "node", MappingProxyType(dict(self.node)))
        object.__setattr__(self, "span", self.span or self.name)


@dataclass(frozen=True)
class Aide:
    """A role that serves a stage without being one (its calls are accounted under its own name).

    Attributes:
        role: The accounting role (and config group, when ``node`` is set).
        stage: The stage it serves (a repeat re-samples it with that stage).
        node: The Hydra node every model plays it with (empty: not a model-bound role group).
        batchable: Whether ``services.llm.batch.roles`` may name it.
        interaction: Its spend is clarification spend (the report's cost axis).
        component: Whether the job builds it as a component of its own (``qtyper=...``).
        timeout_s: Its calls' default request timeout (``services.llm.role_timeout_s``; None: ``timeout_s``).
    """

    role: str
    stage: str
    node: Mapping[str, Any] = field(default_factory=dict)
    batchable: bool = True
    interaction: bool = False
    component: bool = False
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "node", MappingProxyType(dict(self.node)))


def _llm(target: str, prompt: str, cap: int, **extra: Any) -> dict[str, Any]:
    # max_output_tokens: the role's output cap (a reply that stops at it is re-asked, then unscored
    # as `truncated`), sized to what the role must write; the model's reasoning allowance is added
    # where reasoning counts against the cap (conf/model/<name>.yaml request:).
    return {"_target_": f"cts.roles.llm.{target}", "prompt": prompt, **extra, "max_output_tokens": cap}


_CONTRACTS = "cts.core.contracts."
CLARIFY = Stage(
    "clarify",
    "clarifier",
    _CONTRACTS + "Clarifier",
    "ask",
    ("blurred_query", "k"),
    "questions",
    "clarifier",
    ("blurred_query", "k"),
    # mode: batch (k questions at once, the paper) or sequential (one per turn);
    # stop_early (sequential only): the clarifier may stop when the answers so far suffice.
    _llm("LLMClarifier", "clarifier", 512, mode="batch", stop_early=False),
    interaction=True,
    per_turn=True,
)
ANSWER = Stage(
    "answer",
    "ua",
    _CONTRACTS + "UserAnswerer",
    "answer",
    ("fused_query", "question"),
    "answers",
    "ua",
    ("fused_query", "question"),
    _llm("LLMUserAnswerer", "ua", 128),
    span="ua answer",
    interaction=True,
    per_turn=True,
    timeout_s=60.0,  # one short answer
)
REWRITE = Stage(
    "rewrite",
    "rewriter",
    _CONTRACTS + "Rewriter",
    "rewrite",
    ("blurred_query", "qa"),
    "rewritten_query",
    "rewriter",
    ("blurred_query", "qa_pairs"),
    _llm("LLMRewriter", "rewriter", 256),
    interaction=True,
    timeout_s=60.0,  # one query
)
SEARCH = Stage(
    "search",
    "search",
    _CONTRACTS + "SearchBackend",
    "search",
    ("query",),
    "answer",
    span_type="RETRIEVER",
    on_arm=True,
    timeout_s=300.0,  # one WebDancer turn: a long context, long reasoning on a 32B model
)
JUDGE = Stage(
    "judge",
    "judge",
    _CONTRACTS + "Judge",
    "judge",
    ("answer", "nuggets"),
    "labels",
    "judge",
    ("answer", "nuggets"),
    _llm("LLMJudge", "judge", 1024),
    span_type="EVALUATOR",
    on_arm=True,
)
BUILT_IN: tuple[Stage, ...] = (CLARIFY, ANSWER, REWRITE, SEARCH, JUDGE)
"""The paper's protocol, in order."""

QTYPER = Aide("qtyper", CLARIFY.name, component=True)
EXTRACTOR = Aide("extractor", SEARCH.name, _llm("LLMExtractor", "extractor", 4096))
AIDES: tuple[Aide, ...] = (
    QTYPER,
    Aide("gate", CLARIFY.name, interaction=True),
    Aide("visit_summary", SEARCH.name, timeout_s=180.0),  # WebDancer's summary of a whole web page
    EXTRACTOR,
    Aide("preflight", "", batchable=False, timeout_s=30.0),  # the completion pre-flight: a few output tokens
)
"""Roles that serve a stage: the question typer, a clarification gate, WebDancer's page summariser,
the gold extractor (a task of its own; its calls are the search's kind) and the completion pre-flight."""

_declared: list[Stage] = list(BUILT_IN)


def stages() -> tuple[Stage, ...]:
    """Every declared stage, in the order the pipeline runs them."""
    return tuple(_declared)


def stage_named(name: str) -> Stage | None:
    """The declared stage called ``name`` (None if none is)."""
    return next((s for s in _declared if s.name == name), None)


def added() -> tuple[Stage, ...]:
    """The stages declared beyond the paper's (each refines the clarified query before the search)."""
    return tuple(s for s in _declared if s not in BUILT_IN)


def register(new: Stage, before: str = SEARCH.name) -> None:
    """Declare ``new`` right before the stage ``before`` (a query refiner: before the search)."""
    if stage_named(new.name) or any(s.role == new.role for s in _declared):
        raise ValueError(f"stage {new.name!r} (role {new.role!r}) is declared already")
    if before != SEARCH.name or new.sees != ("query",):
        raise ValueError("a new stage refines the clarified query: before='search', sees=('query',)")
    _declared.insert(next(i for i, s in enumerate(_declared) if s.name == before), new)


@contextlib.contextmanager
def registered(new: Stage, before: str = SEARCH.name) -> Iterator[Stage]:
    """:func:`register` ``new`` for the block (tests, an experiment's script)."""
    register(new, before)
    try:
        yield new
    finally:
        _declared.remove(new)


def role_of(stage: str) -> str | None:
    """The role of the stage ``stage`` (None for an undeclared stage)."""
    found = stage_named(stage)
    return found.role if found else None


def accounting_roles() -> tuple[str, ...]:
    """Every role whose calls are accounted: the stages' roles, then the aides'."""
    return (*(s.role for s in _declared), *(a.role for a in AIDES))


def role_timeouts() -> dict[str, float | None]:
    """Every accounted role's default request timeout (``services.llm.role_timeout_s``; None: ``timeout_s``)."""
    return {**{s.role: s.timeout_s for s in BUILT_IN}, **{a.role: a.timeout_s for a in AIDES}}


def batch_roles() -> tuple[str, ...]:
    """The roles ``services.llm.batch.roles`` may name."""
    return (*(s.role for s in _declared if s.batchable), *(a.role for a in AIDES if a.batchable))


def interaction_stages() -> tuple[str, ...]:
    """The stages of the clarification (a failure in one leaves no clarified arm)."""
    return tuple(s.name for s in _declared if s.interaction)


def before_search() -> tuple[str, ...]:
    """The stages that run before the clarified arm's search (a failure in one leaves it unsearched)."""
    names = [s.name for s in _declared]
    return tuple(names[: names.index(SEARCH.name)])


def clarify_roles() -> tuple[str, ...]:
    """Roles whose spend clarification adds on top of searching q (the report's cost axis)."""
    return (*(s.role for s in _declared if s.interaction), *(a.role for a in AIDES if a.interaction))


def model_role_nodes() -> dict[str, Mapping[str, Any]]:
    """Per role group that every model can play: its Hydra node (class, prompt, output cap)."""
    roles: list[Stage | Aide] = [*_declared, *AIDES]
    return {r.role: r.node for r in roles if r.node}


def component_roles() -> tuple[str, ...]:
    """The config keys a job builds a component from: each stage's role, then the aides built on their own."""
    return (*(s.role for s in _declared), *(a.role for a in AIDES if a.component))


def resampled_roles() -> tuple[str, ...]:
    """The roles ``repeat_stages`` may name: the stages' (an aide re-samples with its stage)."""
    return tuple(s.role for s in _declared)


def stage_of_role(role: str) -> str | None:
    """The stage a role plays or serves (None for an undeclared role or the pre-flight)."""
    found = next((s.name for s in _declared if s.role == role), None)
    return found or next((a.stage or None for a in AIDES if a.role == role), None)
