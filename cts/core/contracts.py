"""Every contract in one place: the role Protocols, the clients they use, and the records those name.

A role sees only what its method's arguments carry (the protocol's visibility rules are
these signatures). Components implement these Protocols structurally; nothing subclasses them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from cts.core.records import Record
from cts.core.types import QA, Evidence, GoldDraft, Label, Nugget, SearchResult

__all__ = [
    "TRUNCATED_REASONS",
    "Chat",
    "Clarifier",
    "ClarifyMode",
    "Completion",
    "Decision",
    "Extractor",
    "Fetcher",
    "Gate",
    "InFlight",
    "Judge",
    "JudgePanel",
    "OutcomeGate",
    "Page",
    "PanelVerdict",
    "Progress",
    "QuestionTyper",
    "Rewriter",
    "Route",
    "SearchBackend",
    "SearchHit",
    "SearchProvider",
    "SequentialClarifier",
    "UserAnswerer",
]

# -- the protocol's roles ------------------------------------------------------------------


@runtime_checkable
class Clarifier(Protocol):
    """Asks exactly ``k`` clarification questions about ``blurred_query``."""

    async def ask(self, blurred_query: str, k: int) -> list[str]: ...


ClarifyMode = Literal["batch", "sequential"]


@runtime_checkable
class SequentialClarifier(Protocol):
    """Asks one question per turn; turn i sees ``blurred_query`` and the pairs 1..i-1 only.

    ``mode`` selects how the pipeline calls it (``batch`` = :meth:`Clarifier.ask`);
    ``None`` from :meth:`next_question` means the answers so far suffice (early stop).
    """

    mode: ClarifyMode

    async def ask(self, blurred_query: str, k: int) -> list[str]: ...

    async def next_question(self, blurred_query: str, qa: Sequence[QA], k: int) -> str | None: ...


@runtime_checkable
class UserAnswerer(Protocol):
    """Closed-book user: sees the hidden intent and one question, nothing else."""

    async def answer(self, fused_query: str, question: str) -> str: ...


@runtime_checkable
class Rewriter(Protocol):
    """Writes one query from ``blurred_query`` and the Q&A pairs only."""

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str: ...


@runtime_checkable
class SearchBackend(Protocol):
    """Answers a query (deep search or an extractive stand-in)."""

    async def search(self, query: str) -> SearchResult: ...


@runtime_checkable
class Judge(Protocol):
    """Labels each nugget full/partial/none for one answer."""

    async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]: ...


@dataclass(frozen=True)
class PanelVerdict:
    """A judge panel's labels of one answer and each member's (member name -> nugget id -> label)."""

    labels: Mapping[str, Label]
    members: Mapping[str, Mapping[str, Label]]


@runtime_checkable
class JudgePanel(Protocol):
    """A judge whose label aggregates several members' (the record keeps each member's)."""

    async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]: ...

    async def judge_members(self, answer: str, nuggets: Sequence[Nugget]) -> PanelVerdict: ...


@runtime_checkable
class Extractor(Protocol):
    """Builds gold nuggets from the intent, an archived answer and its evidence."""

    async def extract(self, fused_query: str, answer: str, evidence: Sequence[Evidence]) -> GoldDraft: ...


class QuestionTyper(Protocol):
    """Types one clarification question (multi-label, see :data:`QTYPES`)."""

    async def classify(self, question: str) -> tuple[str, ...]: ...


# -- ask-or-not gates ------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """Whether to ask, with the gate's confidence in that choice (0..1)."""

    ask: bool
    confidence: float = 1.0


@runtime_checkable
class Gate(Protocol):
    """Decides from the blurred query alone."""

    async def decide(self, blurred_query: str) -> Decision: ...


@runtime_checkable
class OutcomeGate(Protocol):
    """Decides from a finished record (only the oracle: an upper bound, not a system)."""

    def decide_outcome(self, record: Record) -> Decision: ...


# -- what a deep-search agent calls ----------------------------------------------------------


@dataclass(frozen=True)
class SearchHit:
    """One organic search result, Serper-style."""

    title: str
    link: str
    snippet: str


@runtime_checkable
class SearchProvider(Protocol):
    """Returns the top ``k`` hits of one query."""

    @property
    def cache_id(self) -> str:
        """Identity of the result source, part of every tool-cache key."""
        ...

    async def search(self, query: str, k: int) -> list[SearchHit]: ...


@dataclass(frozen=True)
class Page:
    """The readable content of one url."""

    url: str
    title: str
    text: str


@runtime_checkable
class Fetcher(Protocol):
    """Turns a url into a :class:`Page`."""

    @property
    def cache_id(self) -> str:
        """Identity of the page source, part of every tool-cache key."""
        ...

    async def fetch(self, url: str) -> Page: ...


# -- the chat client every LLM role uses -------------------------------------------------------

TRUNCATED_REASONS = frozenset({"length", "max_tokens", "MAX_TOKENS"})
"""``finish_reason`` values of a reply cut at the output cap (litellm maps the providers' to ``length``)."""


@dataclass(frozen=True)
class Completion:
    """One model reply and what it cost."""

    text: str
    tokens_in: int
    tokens_out: int
    cost_usd: float
    """USD billed to this job (0 for a cache hit)."""
    cached: bool
    latency_s: float
    reasoning: str = ""
    """Reasoning the provider returned apart from ``text`` (litellm moves ``<think>`` blocks here)."""
    finish_reason: str = ""
    """Why the reply ended as the provider says (``stop``, ``length`` = cut at the output cap, ...)."""
    tokens_reasoning: int = 0
    """Hidden reasoning tokens, a part of ``tokens_out`` (billed as output)."""

    @property
    def truncated(self) -> bool:
        """Whether the reply stopped at the output cap (it may be incomplete)."""
        return self.finish_reason in TRUNCATED_REASONS


@dataclass(frozen=True)
class Route:
    """Where a spec's calls go after the global overrides."""

    model: str
    api_base: str | None
    api_key: str | None
    endpoint: str
    """Concurrency-limit key: the api_base, or the provider for hosted APIs."""
    limit: int
    missing_key: str | None = None
    """Name of the unset key variable, if any (raised only when a request is due)."""
    floor: int | None = None
    """Floor of the endpoint's adaptive limit (the model's ``min_concurrency``)."""


@runtime_checkable
class Chat(Protocol):
    """A chat model bound to one accounting role."""

    spec: Any
    """The model's registry entry (a :class:`cts.llm.ModelSpec`)."""
    role: str

    @property
    def route(self) -> Route:
        """Where the calls go (model id and endpoint after the ``services.llm`` overrides)."""
        ...

    def with_role(self, role: str) -> Chat:
        """The same model, its usage booked under ``role``."""
        ...

    async def complete(
        self,
        messages: list[dict[str, str]],
        *,
        prompt_version: str = "",
        max_output_tokens: int | None = None,
        **params: Any,
    ) -> Completion: ...


# -- progress shared by the jobs of a sweep ----------------------------------------------------


@dataclass(frozen=True)
class InFlight:
    """Requests on the wire now, over every endpoint of the running event loop."""

    calls: int
    oldest_s: float
    """Seconds the oldest of them has waited for its answer (0 when none)."""
    batches_submitted: int = 0
    """Batches sent to a Batch API so far (``services.llm.batch``), ..."""
    batches_running: int = 0
    """... of which not ended yet, ..."""
    batches_done: int = 0
    """... and ended (their replies taken)."""
    batch_oldest_s: float = 0.0
    """Seconds the oldest running batch has run (0 when none)."""

    def postfix(self) -> dict[str, str]:
        """What a progress bar shows of them (tqdm's postfix): how many, the oldest's age, and the batches."""
        shown = {"in_flight": str(self.calls), "oldest": f"{self.oldest_s:.0f}s"}
        if self.batches_submitted:
            shown["batches"] = f"{self.batches_submitted} sent/{self.batches_running} running/{self.batches_done} done"
            shown["batch_age"] = f"{self.batch_oldest_s:.0f}s"
        return shown


class Progress(Protocol):
    """A progress display shared by several jobs (e.g. one bar for a sweep)."""

    def add(self, total: int, done: int) -> None:
        """A job with ``total`` instances, ``done`` already finished, started."""

    def advance(self, record: Record) -> None:
        """One instance finished."""

    def calls(self, in_flight: InFlight) -> None:
        """The LLM requests in flight now and the age of the oldest (every second while jobs run)."""
