"""LLM roles of the closed-book protocol (prompts A-E of the paper).

Each role renders its prompt from ``prompts/``, calls its model through the
chat client (:class:`cts.llm.Chat`: cache, retries, accounting), built by
the composition layer from the model registry, then repairs and
validates the reply. An invalid reply is re-asked (the bad reply plus a short
correction is appended to the conversation) at most ``max_reasks`` times; then
the role raises :class:`cts.core.types.UnscoredError`, and the item is recorded as
unscored, never as 0.

Each role asks for its reply's shape as a JSON schema (:mod:`cts.roles.schemas`); the model's
request rules send it where the endpoint honours one (``request.structured_output``), and the
parsers read both the shaped and the plain replies. ``structured=false`` on a role, or a
``response_format`` in its ``params``, replaces the role's own schema.

Signatures follow :mod:`cts.core.types`: the Clarifier and Rewriter take no
``fused_query``, so the hidden intent cannot reach them.

The User Answerer's "don't know" is always the protocol token ``unknown``:
replies such as ``Unknown.``, ``"unknown"``, ``UNKNOWN``, ``Not specified``, or a
whole-reply Chinese equivalent (``未知``, ``不知道``, ``未提及``, ``无法确定`` ...)
are normalised to it; an answer that merely contains such a word is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from cts._util.prompts import Prompt, load_prompt
from cts.core.contracts import ClarifyMode
from cts.core.types import QA, UNKNOWN, Evidence, GoldDraft, Label, Nugget, UnscoredError
from cts.llm import Chat
from cts.roles import schemas
from cts.roles.parse import (
    STOP_ALLOWED,
    STOP_FORBIDDEN,
    normalise_answer,
    parse_gold,
    parse_nugget_labels,
    parse_query,
    parse_questions,
    parse_turn,
)
from cts.roles.personas import Persona
from cts.roles.reask import (
    DEFAULT_MAX_REASKS,
    Asking,
    InvalidOutput,
    Truncated,
    ask_until_valid,
)

T = TypeVar("T")


@dataclass(frozen=True)
class RoleSettings:
    """How an LLM role calls its model: the role's own keys in its config node, kept flat there
    (``clarifier.max_output_tokens``) and bound into this object by the composition layer.

    Attributes:
        role: Accounting name (None = the class's role).
        max_reasks: Re-asks after invalid output (the composition layer passes
            ``services.llm.max_reasks`` when the config leaves it unset).
        prompts_dir: Directory of prompt files (None = the repository's ``prompts/``).
        params: Decoding params overriding the model's for this role.
        max_output_tokens: The role's output cap (None = the class's ``default_cap``); a
            reply that stops at it is re-asked, then the item is unscored as ``truncated``.
        structured: Send the reply's JSON schema (None = the class's ``default_structured``).
    """

    role: str | None = None
    max_reasks: int = DEFAULT_MAX_REASKS
    prompts_dir: str | None = None
    params: Mapping[str, Any] | None = None
    max_output_tokens: int | None = None
    structured: bool | None = None


DEFAULT_ROLE = RoleSettings()


class _LLMRole:
    """Shared plumbing: prompt, client, bounded re-asks."""

    default_role: ClassVar[str]
    default_cap: ClassVar[int]
    """Output tokens the role's reply needs, with room to spare (``max_output_tokens`` overrides)."""
    default_structured: ClassVar[bool] = True
    """Whether the role sends its reply's schema by default (``structured`` overrides)."""

    @classmethod
    def example_schema(cls) -> Mapping[str, Any] | None:
        """The schema of one typical call (the completion pre-flight sends it: a schema the provider refuses
        stops the launch, not the job)."""
        return None

    def __init__(self, model: Chat, prompt: str, settings: RoleSettings = DEFAULT_ROLE) -> None:
        """Bind a prompt and a model.

        Args:
            model: Chat client of the model (the composition layer builds it from ``conf/model/``).
            prompt: Prompt file stem under ``settings.prompts_dir``.
            settings: Accounting name, re-asks, prompts dir, params, output cap, structured output.
        """
        s = settings
        self.role = s.role or self.default_role
        self.prompt = load_prompt(prompt, s.prompts_dir)
        self.client = model.with_role(self.role)
        self.max_reasks = s.max_reasks
        self.params = dict(s.params or {})
        self.max_output_tokens = self.default_cap if s.max_output_tokens is None else int(s.max_output_tokens)
        self.structured = self.default_structured if s.structured is None else bool(s.structured)

    def request_params(self, schema: Mapping[str, Any] | None) -> dict[str, Any]:
        """The role's params, with ``response_format`` asking for ``schema`` (unless off or set in ``params``)."""
        if schema is None or not self.structured or "response_format" in self.params:
            return dict(self.params)
        return {**self.params, "response_format": schemas.response_format(self.role, schema)}

    async def _ask(
        self,
        parse: Callable[[str], T],
        prompt: Prompt | None = None,
        schema: Mapping[str, Any] | None = None,
        **values: Any,
    ) -> T:
        prompt = prompt or self.prompt
        try:
            return await ask_until_valid(
                self.client,
                prompt.messages(**values),
                parse,
                Asking(self.max_reasks, prompt.version, self.request_params(schema), self.max_output_tokens),
            )
        except Truncated as exc:
            raise UnscoredError(
                f"{self.role}: truncated after {self.max_reasks} re-ask(s): {exc}", kind="truncated"
            ) from exc
        except InvalidOutput as exc:
            raise UnscoredError(f"{self.role}: invalid output after {self.max_reasks} re-ask(s): {exc}") from exc


class LLMClarifier(_LLMRole):
    """Prompt A: exactly ``k`` single-dimension questions from the blurred query only.

    In ``sequential`` mode the pipeline calls :meth:`next_question` once per turn
    with the earlier pairs (prompt ``sequential_prompt``); the reply may stop the
    interaction only when ``stop_early`` is set.
    """

    default_role = "clarifier"
    default_cap = 512  # k <= 3 questions as a JSON array

    @classmethod
    def example_schema(cls) -> Mapping[str, Any]:
        """``questions`` of a typical call."""
        return schemas.questions(1)

    def __init__(
        self,
        model: Chat,
        prompt: str,
        mode: ClarifyMode = "batch",
        stop_early: bool = False,
        sequential_prompt: str = "clarifier_sequential",
        settings: RoleSettings = DEFAULT_ROLE,
    ) -> None:
        # Explicit parameters (no **kwargs): the pre-flight names a misspelt key by the signature.
        super().__init__(model, prompt, settings)
        if mode not in ("batch", "sequential"):
            raise ValueError(f"mode must be batch or sequential, got {mode!r}")
        self.mode: ClarifyMode = mode
        self.stop_early = stop_early
        self.turn_prompt = load_prompt(sequential_prompt, settings.prompts_dir) if mode == "sequential" else None

    async def next_question(self, blurred_query: str, qa: Sequence[QA], k: int) -> str | None:
        """One question for the next turn (or None: stop), from ``q`` and the earlier pairs only."""
        if len(qa) >= k:
            return None
        if self.turn_prompt is None:
            raise ValueError("next_question needs mode=sequential")
        earlier = "\n".join(f"Q{i}: {p.question}\nA{i}: {p.answer}" for i, p in enumerate(qa, 1)) or "(none)"
        stop_rule = STOP_ALLOWED if self.stop_early else STOP_FORBIDDEN
        asked = [p.question for p in qa]
        return await self._ask(
            lambda text: parse_turn(text, asked, self.stop_early),
            self.turn_prompt,
            schemas.turn(self.stop_early),
            blurred_query=blurred_query,
            qa_pairs=earlier,
            turn=len(qa) + 1,
            k=k,
            stop_rule=stop_rule,
        )

    async def ask(self, blurred_query: str, k: int) -> list[str]:
        """Return exactly ``k`` distinct clarification questions about ``blurred_query``."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        return await self._ask(
            lambda text: parse_questions(text, k), schema=schemas.questions(k), blurred_query=blurred_query, k=k
        )


class LLMUserAnswerer(_LLMRole):
    """Prompt B: answers one question from the intent only, else ``unknown``; a persona may change how."""

    default_role = "ua"
    default_cap = 128  # a minimal answer or `unknown`

    def __init__(
        self,
        model: Chat,
        prompt: str,
        persona: Persona | None = None,
        settings: RoleSettings = DEFAULT_ROLE,
    ) -> None:
        # A persona (ua/persona) brings its own prompt; its `unknown` coin is drawn before any call.
        chosen = persona.prompt if persona is not None else prompt
        super().__init__(model, chosen, settings)
        self.persona = persona

    @classmethod
    def example_schema(cls) -> Mapping[str, Any]:
        """``answer`` of a typical call."""
        return schemas.answer()

    async def answer(self, fused_query: str, question: str) -> str:
        """Return a minimal answer stated in ``fused_query``, or ``unknown``."""
        if self.persona is not None and self.persona.withholds(fused_query, question):
            return UNKNOWN
        return await self._ask(normalise_answer, schema=schemas.answer(), fused_query=fused_query, question=question)


class LLMRewriter(_LLMRole):
    """Prompt C: one query from the blurred query and the Q&A pairs only."""

    default_role = "rewriter"
    default_cap = 256  # one query

    @classmethod
    def example_schema(cls) -> Mapping[str, Any]:
        """``query`` of a typical call."""
        return schemas.query()

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str:
        """Return the rewritten query (the blurred query itself when there are no pairs)."""
        if not qa:
            return blurred_query
        pairs = "\n".join(f"Q{i}: {p.question}\nA{i}: {p.answer}" for i, p in enumerate(qa, 1))
        return await self._ask(parse_query, schema=schemas.query(), blurred_query=blurred_query, qa_pairs=pairs)


class LLMJudge(_LLMRole):
    """Prompt E: strict full/partial/none per nugget, all nuggets in one call."""

    default_role = "judge"
    default_cap = 1024  # one label per nugget, as JSON

    @classmethod
    def example_schema(cls) -> Mapping[str, Any]:
        """``labels`` of a typical call."""
        return schemas.labels(["n1"])

    async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]:
        """Return one label per nugget id."""
        if not nuggets:
            return {}
        ids = [n.id for n in nuggets]
        listing = "\n".join(f"{n.id}: {n.text}" for n in nuggets)
        return await self._ask(
            lambda text: parse_nugget_labels(text, ids), schema=schemas.labels(ids), answer=answer, nuggets=listing
        )


class LLMExtractor(_LLMRole):
    """Prompt D: evidence-grounded weighted nuggets (the static GOLD JSON)."""

    default_role = "extractor"
    default_cap = 4096  # the GOLD JSON: weighted nuggets with evidence ids

    @classmethod
    def example_schema(cls) -> Mapping[str, Any]:
        """``gold`` of a typical call."""
        return schemas.gold(["e1"])

    async def extract(self, fused_query: str, answer: str, evidence: Sequence[Evidence]) -> GoldDraft:
        """Return a GOLD draft whose nuggets cite only ids of ``evidence``."""
        listing = "\n\n".join(f"[{e.id}] {e.title} ({e.source})\n{e.snippet}" for e in evidence)
        ids = [e.id for e in evidence]
        return await self._ask(
            lambda text: parse_gold(text, ids),
            schema=schemas.gold(ids),
            fused_query=fused_query,
            answer=answer,
            evidence=listing or "(none)",
        )
