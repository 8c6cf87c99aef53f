"""Ask-or-not gates: decide per instance whether to clarify or to search ``q`` directly.

A gate sees the blurred query ``q`` only (like the Clarifier), never ``q*`` or
any outcome; the one exception is :class:`OracleGate`, the upper bound, which
reads finished records (it asks exactly where the clarified arm beat orig).
Gates are evaluated after the fact over finished sweeps (:mod:`cts.report.gate_evaluation`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cts.core.contracts import Decision, Gate, OutcomeGate
from cts.core.records import Record
from cts.corpus.wiki import Corpus
from cts.llm import Chat
from cts.roles import schemas
from cts.roles.llm import DEFAULT_ROLE, RoleSettings, _LLMRole
from cts.roles.parse import load_json
from cts.roles.reask import InvalidOutput
from cts.roles.rules import head_term
from cts.text.tokens import STOPWORDS_ZH, content_tokens, is_cjk, normalize

__all__ = [
    "AlwaysGate",
    "Decision",
    "Gate",
    "LLMGate",
    "NeverGate",
    "OracleGate",
    "OutcomeGate",
    "RuleGate",
    "parse_decision",
]


class AlwaysGate:
    """The paper: always clarify."""

    async def decide(self, blurred_query: str) -> Decision:
        """Ask, whatever the query."""
        return Decision(True)


class NeverGate:
    """Never clarify: the gated system is the orig arm."""

    async def decide(self, blurred_query: str) -> Decision:
        """Do not ask, whatever the query."""
        return Decision(False)


class OracleGate:
    """Upper bound: ask exactly where the clarified arm scored higher than orig."""

    def decide_outcome(self, record: Record) -> Decision:
        """Ask iff both arms are scored and the clarified arm beat the orig arm."""
        s, o = record.score, record.orig_score
        return Decision(s is not None and o is not None and s > o)


class RuleGate:
    """Offline heuristic: ask when ``q`` is short or its head term is shared by several titles.

    Both signals are generic: a query of few content words leaves more unsaid, and a
    head term that many corpus titles contain (``Mercury`` in ``Mercury (planet)``,
    ``Mercury (element)`` ...) is ambiguous in that corpus. No knowledge of how any
    dataset was built is used. Length is counted in content words (see :func:`word_count`).
    """

    def __init__(
        self,
        corpus: Corpus | None = None,
        max_tokens: int = 3,
        min_titles: int = 2,
        titles: Iterable[str] | None = None,
    ) -> None:
        """Args:
        corpus: Supplies the titles when ``titles`` is not given (read on first use).
        max_tokens: Ask when ``q`` has at most this many content tokens.
        min_titles: Ask when at least this many titles contain the head term.
        titles: Title list to use instead of the corpus (tests, other corpora).
        """
        self.corpus = corpus
        self.max_tokens, self.min_titles = max_tokens, min_titles
        self._titles = tuple(normalize(t) for t in titles) if titles is not None else None
        self._counts: dict[str, int] = {}
        self._by_word: dict[str, list[str]] | None = None

    def titles(self) -> tuple[str, ...]:
        """Normalised titles of the corpus (built once per job)."""
        if self._titles is None:
            if self.corpus is None:
                raise ValueError("RuleGate needs a corpus or titles")
            self._titles = tuple(normalize(d.title) for d in self.corpus.docs)
        return self._titles

    def title_matches(self, blurred_query: str) -> int:
        """How many titles contain the query's head term (as a word; as a substring for CJK).

        Counted once per head term (a sweep's report asks for the same queries in every job),
        and for a Latin head only over the titles that hold its first word as a word: a match
        of ``(?<!\\w)head(?!\\w)`` starts where such a word does.
        """
        head = normalize(head_term(blurred_query))
        if not head:
            return 0
        if head not in self._counts:
            self._counts[head] = self._count(head)
        return self._counts[head]

    def _count(self, head: str) -> int:
        if is_cjk(head):
            return sum(head in t for t in self.titles())
        first = _WORD.match(head)
        candidates = self._titles_with(first.group(0)) if first else self.titles()
        pattern = re.compile(rf"(?<!\w){re.escape(head)}(?!\w)")
        return sum(bool(pattern.search(t)) for t in candidates)

    def _titles_with(self, word: str) -> list[str]:
        if self._by_word is None:
            by_word: dict[str, list[str]] = {}
            for title in self.titles():
                for w in set(_WORD.findall(title)):
                    by_word.setdefault(w, []).append(title)
            self._by_word = by_word
        return self._by_word.get(word, [])

    async def decide(self, blurred_query: str) -> Decision:
        """Ask when the query is short or its head term is ambiguous among titles."""
        n_tokens = word_count(blurred_query)
        matches = self.title_matches(blurred_query)
        short, shared = n_tokens <= self.max_tokens, matches >= self.min_titles
        votes = int(short) + int(shared)
        return Decision(votes > 0, confidence=0.5 + 0.25 * votes if votes else 0.75)


_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"\w+")  # a word (a Latin head term's first: where its matches start)


def word_count(text: str) -> int:
    """Content words of ``text``: Latin words without stopwords, plus about one word per two CJK characters.

    Chinese has no spaces; a two-character word is the common case, so a run of n
    characters (function words removed) counts as ceil(n / 2) words.
    """
    latin = [t for t in content_tokens(_CJK.sub(" ", text))]
    runs = _CJK.findall(text)
    cjk_chars = 0
    for run in runs:
        for w in sorted(STOPWORDS_ZH, key=len, reverse=True):
            run = run.replace(w, "")
        cjk_chars += len(run)
    return len(latin) + math.ceil(cjk_chars / 2)


_BOOL = {"true": True, "yes": True, "ask": True, "false": False, "no": False, "dont_ask": False}


def parse_decision(text: str) -> Decision:
    """``{"ask": true|false, "confidence": 0..1}`` from a model reply."""
    data = load_json(text)
    if not isinstance(data, Mapping) or "ask" not in data:
        raise InvalidOutput('expected a JSON object {"ask": true or false, "confidence": number}')
    ask: Any = data["ask"]
    if isinstance(ask, str):
        ask = _BOOL.get(ask.strip().lower())
    if not isinstance(ask, bool):
        raise InvalidOutput('"ask" must be true or false')
    try:
        confidence = float(data.get("confidence", 1.0))
    except (TypeError, ValueError) as e:
        raise InvalidOutput('"confidence" must be a number between 0 and 1') from e
    if not 0.0 <= confidence <= 1.0:
        raise InvalidOutput('"confidence" must be between 0 and 1')
    return Decision(ask, confidence)


class LLMGate(_LLMRole):
    """A model sees ``q`` only and says whether clarifying questions would help (prompt ``gate``).

    ``min_confidence`` turns a low-confidence "ask" into "don't ask".
    """

    default_role = "gate"
    default_cap = 128  # {"ask": ..., "confidence": ...}

    @classmethod
    def example_schema(cls) -> Mapping[str, Any]:
        """The gate's schema (the same for every call)."""
        return schemas.decision()

    def __init__(
        self,
        model: Chat,
        prompt: str,
        min_confidence: float = 0.0,
        settings: RoleSettings = DEFAULT_ROLE,
    ) -> None:
        # Explicit parameters: the pre-flight names a misspelt key by the signature.
        super().__init__(model, prompt, settings)
        self.min_confidence = min_confidence

    async def decide(self, blurred_query: str) -> Decision:
        """Ask the model; a low-confidence ask becomes don't-ask."""
        d = await self._ask(parse_decision, schema=schemas.decision(), blurred_query=blurred_query)
        return Decision(d.ask and d.confidence >= self.min_confidence, d.confidence)


def gate_kind(gate: object) -> str:
    """``outcome`` for the oracle, ``query`` for gates that read ``q`` only."""
    if isinstance(gate, OutcomeGate):
        return "outcome"
    if isinstance(gate, Gate):
        return "query"
    raise TypeError(f"{type(gate).__name__} is not a gate (needs decide or decide_outcome)")
