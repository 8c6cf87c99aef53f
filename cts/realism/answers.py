"""What counts as an answer: the one rule applied to people's replies and to the UA's alike.

An answer is **informative** when it gives the searcher something to add to the query about the
asked attribute. It is *not* informative when, once normalised (NFKC, lower case, punctuation
dropped), it

1. is empty, or the protocol's ``unknown``;
2. states that the person cannot or will not answer (:data:`NON_ANSWERS`: "I don't know", "not sure",
   "no idea", "doesn't matter", "maybe", "either", "not related to my search", 不知道, 不清楚, 随便,
   都可以 ...), with no other content word left;
3. is a bare refusal of the offered option ("no", "nope", "no thanks", "no, I don't want the gofundme
   campaign", 不是, 不用): it rules one reading out but names nothing the question did not, so a
   rewriter could add nothing from it.

An answer that starts with a confirmation ("yes", "sure", 是的 ...) is informative (the offered option
is the intent), and so is "no, I want reviews" (a negation that names what is wanted), and "the
fruit" (one offered option chosen). Concretely: remove the non-answer phrases, then the negation and
filler words (:data:`FILLERS`); the answer is informative iff a content token
(:func:`cts.text.tokens.content_tokens`, CJK-aware) is left, and for an answer that starts with a
negation (no, not, 不 ...), one that the question does not hold. Tuned on ClariQ's train split only.
"""

from __future__ import annotations

import re
from collections import Counter

from cts.core.types import UNKNOWN
from cts.text.tokens import content_tokens, normalize

__all__ = ["FILLERS", "NON_ANSWERS", "content_f1", "is_informative", "leaked_tokens"]

NON_ANSWERS = re.compile(
    r"\b(?:i\s+)?(?:do\s*n[o']?t|dont|do not|don)\s+know(?:\s+yet)?\b|\bnot\s+(?:really\s+)?sure\b|\bunsure\b"
    r"|\bno\s+idea\b|\bnot\s+certain\b|\b(?:it\s+)?(?:does\s*n[o']?t|doesnt|does not)\s+matter\b"
    r"|\bno\s+preference\b|\bwhatever\b|\bmaybe\b|\bperhaps\b|\bpossibl[ey]\b|\b(?:would\s*n[o']?t|wouldnt)\s+help\b|\beither(?:\s+one)?\b|\bn/?a\b|\bany(?:thing)?\b"
    r"|\b(?:not|is\s*n[o']?t)\s+(?:related|relevant)\b(?:\s+to\s+(?:my|what|the)\b[\w\s]*)?|\bunrel\w*\b|\birrelevant\b|\b(?:not|unable)\s+(?:be\s+)?able\s+to\b|\bcan\W?not\b|\bcan\W?t\b|\bnot\s+what\s+i\W?m\s+looking\s+for\b"
    r"|\bnot\s+interested\b(?:\s+in\s+(?:this|that)\b(?:\s+topic)?)?|\bcan\W?t\s+say\b|\bhard\s+to\s+say\b"
    r"|不知道|不清楚|不确定|不太清楚|说不好|说不清|没想好|无所谓|都可以|都行|随便|没有要求|不相关|无关",
)
FILLERS = frozenset(
    """no nope nah not never none thanks thank sorry really im i'm iam dont don't do it that thats that's this
    isnt isn't is am are just okay ok well um uh hmm yet quite looking want wanting search
    不 不是 不用 不要 没有 没 谢谢 算了 是的""".split()
)
"""Negation and filler words a bare refusal is made of (CJK: whole words, removed before bigrams)."""
_ZH_FILLERS = sorted((w for w in FILLERS if not w.isascii()), key=len, reverse=True)


def _rest(text: str) -> list[str]:
    """Content tokens of ``text`` left once non-answer phrases and fillers are removed."""
    bare = NON_ANSWERS.sub(" ", normalize(text))
    for w in _ZH_FILLERS:
        bare = bare.replace(w, " ")
    return [t for t in content_tokens(bare) if t not in FILLERS]


_NO = re.compile(r"^(?:no|nope|nah|not|never|不|没)")
_YES = re.compile(r"^(?:yes|yeah|yep|yup|sure|absolutely|exactly|correct|是|是的|对|对的|好的|要)\b")


def is_informative(answer: str, question: str = "") -> bool:
    """Whether ``answer`` to ``question`` gives something to add to the query (the rule of the module docstring)."""
    text = normalize(answer).strip(" .。!！?？,，")
    if not text or text == UNKNOWN:
        return False
    if _YES.match(text):
        return True
    asked = set(content_tokens(question)) if _NO.match(text) else set()
    return any(t not in asked for t in _rest(text))


_POSSESSIVE = re.compile(r"['’]s$")


def _stems(text: str) -> set[str]:
    """Content tokens with a possessive ``'s`` dropped ("Pennsylvania's" holds "pennsylvania")."""
    return {_POSSESSIVE.sub("", t) for t in content_tokens(text)}


def leaked_tokens(answer: str, fused_query: str, question: str) -> frozenset[str]:
    """The answer's content tokens that neither the intent nor the question holds (what it adds)."""
    return frozenset(_stems(answer) - _stems(fused_query) - _stems(question))


def content_f1(a: str, b: str) -> float:
    """Token F1 of two answers over content tokens (multisets; CJK bigrams); 0 when either has none."""
    ta, tb = Counter(content_tokens(a)), Counter(content_tokens(b))
    common = sum((ta & tb).values())
    if not common:
        return 0.0
    precision, recall = common / sum(ta.values()), common / sum(tb.values())
    return 2 * precision * recall / (precision + recall)
