"""Rule-based roles: honest, deterministic, non-LLM baselines of the protocol.

They make the whole pipeline runnable offline and give a floor any LLM role
should beat. They are named as baselines everywhere (config option ``rules*``)
and never stand in for a model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from cts.core.contracts import ClarifyMode
from cts.core.types import QA, UNKNOWN
from cts.roles.personas import Persona
from cts.text.lexicon import ZH_PLACES_RULES, PlaceLexicon, place_pattern
from cts.text.qtypes import classify_question
from cts.text.tokens import STOPWORDS_EN, STOPWORDS_ZH, content_tokens, is_cjk, language

DIMENSIONS = ("scope", "time", "region", "definition")

_QUESTIONS = {
    "en": {
        "scope": "Which “{head}” do you mean: which sense, work or specific entity?",
        "time": "Which time period of “{head}” are you asking about?",
        "region": "Which region or place are you asking about for “{head}”?",
        "definition": "By what definition or criterion should “{head}” be understood?",
    },
    "zh": {
        "scope": "您说的“{head}”具体指哪一个（哪种含义、作品或对象）？",
        "time": "您关注的是“{head}”的哪个时间段或时期？",
        "region": "您问的“{head}”是哪个地区或地点？",
        "definition": "“{head}”按什么定义或标准来理解？",
    },
}
_QUOTED = re.compile(r"“([^”]+)”|\"([^\"]+)\"")
_EN_EDGE = re.compile(r"^[\W_]+|[\W_]+$")
_ZH_STEMS = sorted(STOPWORDS_ZH | {"是什么", "有哪些", "是谁", "在哪里"}, key=len, reverse=True)
_CONNECTIVES = re.compile(
    r"^(?:[\s,;:()\-–—]|the\b|a\b|an\b|by\b|in\b|of\b|on\b|during\b|as\b|from\b|for\b|"
    r"at\b|in the sense of\b|meaning\b|which is\b|known as\b|called\b|的|在|于|之)+",
    re.IGNORECASE,
)
_TIME = re.compile(
    r"\b\d{3,4}\s*[–-]\s*(?:\d{2,4}|present)\b|\b\d{1,2}(?:st|nd|rd|th)[ -]centur(?:y|ies)(?: BC| AD)?"
    r"|\b(?:1[0-9]|20)\d{2}s?\b|\bWorld War (?:I{1,2}|One|Two)\b|\b(?:antiquity|ancient|medieval|"
    r"Middle Ages|Renaissance|Bronze Age|Iron Age|Stone Age|prehistor\w*|Cold War|Victorian era)\b"
    r"|\d{3,4}\s*[-–至到]\s*\d{2,4}\s*年?|\d{2,4}\s*年代?|\d{1,2}\s*世纪|[夏商周秦汉晋隋唐宋元明清]朝"
    r"|(?:古代|近代|现代|当代|民国|战国|春秋|三国|冷战)(?:时期)?",
    re.IGNORECASE,
)
_ZH_PLACE = re.compile("(?:" + "|".join(sorted(ZH_PLACES_RULES, key=len, reverse=True)) + ")(?:省|市|地区)?")


def head_term(query: str) -> str:
    """The query's head term: the query without request stems and function words at its edges.

    Examples: ``Tell me about Mercury`` -> ``Mercury``; ``介绍一下长城`` -> ``长城``.
    """
    if is_cjk(query):
        text = query.strip(" ？?。！!，,")
        changed = True
        while changed:
            changed = False
            for stem in _ZH_STEMS:
                if text.startswith(stem) and len(text) > len(stem):
                    text, changed = text[len(stem) :], True
                if text.endswith(stem) and len(text) > len(stem):
                    text, changed = text[: -len(stem)], True
        return text.strip() or query.strip()
    words = query.split()
    bare = [_EN_EDGE.sub("", w).lower() for w in words]
    start, end = 0, len(words)
    while end - start > 1 and (bare[start] in STOPWORDS_EN or not bare[start]):
        start += 1
    while end - start > 1 and (bare[end - 1] in STOPWORDS_EN or not bare[end - 1]):
        end -= 1
    # Strip punctuation at the edges of the span only: "Symphony No. 9" keeps its dot.
    return _EN_EDGE.sub("", " ".join(words[start:end])) or query.strip()


class RuleClarifier:
    """Asks one templated question per ambiguity dimension, in a configured order."""

    def __init__(
        self,
        order: Sequence[str] = DIMENSIONS,
        mode: ClarifyMode = "batch",
        stop_early: bool = False,
    ) -> None:
        """Args:
        order: Dimensions to ask about first; the rest of :data:`DIMENSIONS` follow.
        mode: ``batch`` (k questions at once, the paper) or ``sequential`` (one per turn).
        stop_early: In sequential mode, stop after the first known answer.
        """
        unknown = set(order) - set(DIMENSIONS)
        if unknown:
            raise ValueError(f"unknown dimensions {sorted(unknown)}; choose from {DIMENSIONS}")
        if mode not in ("batch", "sequential"):
            raise ValueError(f"mode must be batch or sequential, got {mode!r}")
        self.order = tuple(order) + tuple(d for d in DIMENSIONS if d not in order)
        self.mode: ClarifyMode = mode
        self.stop_early = stop_early

    async def next_question(self, blurred_query: str, qa: Sequence[QA], k: int) -> str | None:
        """The next turn's question from ``q`` and the pairs so far (sequential mode).

        After ``unknown`` on a dimension the next dimension is asked; a dimension
        that an earlier answer already fills (e.g. an answer that names a period
        before the time question) is skipped; with ``stop_early`` a known answer
        ends the interaction.
        """
        if not 1 <= k <= len(self.order):
            raise ValueError(f"k must be in 1..{len(self.order)}, got {k}")
        if len(qa) >= k or (self.stop_early and any(not p.is_unknown for p in qa)):
            return None
        templates = _QUESTIONS[language(blurred_query)]
        head = head_term(blurred_query)
        asked = {p.question for p in qa}
        known = " ".join(p.answer for p in qa if not p.is_unknown)
        for dim in self.order:
            question = templates[dim].format(head=head)
            if question not in asked and not _filled(dim, known):
                return question
        return None

    async def ask(self, blurred_query: str, k: int) -> list[str]:
        """Return exactly ``k`` distinct questions naming the query's head term."""
        if not 1 <= k <= len(self.order):
            raise ValueError(f"k must be in 1..{len(self.order)}, got {k}")
        templates = _QUESTIONS[language(blurred_query)]
        head = head_term(blurred_query)
        return [templates[dim].format(head=head) for dim in self.order[:k]]


def _filled(dim: str, answers: str) -> bool:
    """Whether earlier known answers already pin a time or a (Chinese) place down."""
    if dim == "time":
        return bool(_TIME.search(answers))
    if dim == "region":
        return bool(_ZH_PLACE.search(answers))
    return False


class NoClarifier:
    """The orig arm: asks nothing, so the blurred query is searched as is."""

    def __init__(self, mode: ClarifyMode = "batch", stop_early: bool = False) -> None:
        """``mode``/``stop_early`` are accepted: asking nothing is the same in both modes."""
        del mode, stop_early

    async def ask(self, blurred_query: str, k: int) -> list[str]:
        """Return no question, whatever the budget ``k``."""
        return []


@lru_cache(maxsize=4)
def _place_regex(places: tuple[str, ...]) -> re.Pattern[str]:
    return place_pattern(places)


class RuleUserAnswerer:
    """Closed-book UA: the minimal span of ``q*`` that fills the asked dimension, else ``unknown``.

    Time is read from dates, years, centuries and eras; region from a place lexicon
    built from the corpus's Geography titles (and Chinese administrative suffixes);
    scope, sense and definition from the qualifier that ``q*`` adds after the
    head term the question names.
    """

    def __init__(self, places: PlaceLexicon, persona: Persona | None = None) -> None:
        """Args:
        places: The corpus's place names (the composition layer builds them once per job).
        persona: The kind of user to play (``ua/persona``; None: cooperative).

        Raises:
            ValueError: The persona has no rule baseline (``vague``: play it with an LLM UA).
        """
        if persona is not None and persona.rule is None:
            raise ValueError(
                f"persona {persona.name} has no rule baseline; play it with an LLM UA (ua=<model> ua/persona={persona.name})"
            )
        self.places = places
        self.persona = persona

    async def answer(self, fused_query: str, question: str) -> str:
        """Answer one question from ``fused_query`` alone, as the persona would."""
        persona = self.persona
        if persona is not None and persona.withholds(fused_query, question):
            return UNKNOWN
        quoted = _QUOTED.search(question)
        head = (quoted.group(1) or quoted.group(2)) if quoted else ""
        frame = _QUOTED.sub(" ", question)  # type the question's frame, not the head term
        types = classify_question(frame)
        # A question that names a concrete slot (time, region) is answered from that slot only.
        dims = [t for t in types if t in ("time", "region")] or types
        if persona is not None and persona.rule == "off_target":  # a nearby facet: one the question did not ask
            dims = [d for d in ("time", "region", "scope") if d not in types]
        for dim in dims:
            span = self._span(dim, fused_query, head)
            if span:
                return persona.shorten(span) if persona is not None else span
        return UNKNOWN

    def _span(self, dim: str, intent: str, head: str) -> str:
        rest = _without(intent, head)
        if dim == "time":
            m = _TIME.search(rest)
            return m.group(0).strip() if m else ""
        if dim == "region":
            m = _place_regex(self.places.names).search(rest) or _ZH_PLACE.search(rest)
            return m.group(0) if m else ""
        if dim in ("scope", "definition"):
            return _qualifier(intent, head)
        return ""


def _without(text: str, head: str) -> str:
    if not head:
        return text
    return re.sub(re.escape(head), " ", text, flags=re.IGNORECASE)


def _qualifier(intent: str, head: str) -> str:
    """The span of the intent after the head term, without leading connectives."""
    if not head:
        return ""
    m = re.search(re.escape(head), intent, flags=re.IGNORECASE)
    if not m:
        return ""
    after = _CONNECTIVES.sub("", intent[m.end() :]).strip(" ?？.。!！,，")
    if after:
        return after
    before = head_term(intent[: m.start()]) if intent[: m.start()].strip() else ""
    return before if content_tokens(before) else ""


class RuleRewriter:
    """Closed-book rewriter: ``q`` plus every known answer; an ``unknown`` adds nothing."""

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str:
        """Append the known answers (not already in the query) to the blurred query."""
        query = blurred_query.strip()
        seen = set(content_tokens(query))
        additions = []
        for pair in qa:
            if pair.is_unknown or not pair.answer.strip():
                continue
            if set(content_tokens(pair.answer)) - seen:
                additions.append(pair.answer.strip())
                seen |= set(content_tokens(pair.answer))
        if not additions:
            return query
        sep = "，" if is_cjk(query) else ", "
        return query.rstrip(" ?？.。") + sep + sep.join(additions)
