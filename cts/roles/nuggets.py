"""Rule-based nugget extractor: a non-LLM baseline for static gold construction.

The paper extracts gold nuggets with an LLM (ERNIE-4.5-Turbo, prompt D). This
module is the honest offline stand-in: it takes the lead sentences of the
top-ranked evidence documents as nuggets, weighted by position, each citing
its document. It never paraphrases, decomposes or judges importance, so its
gold is a lexical proxy, not a reproduction of the paper's gold.
"""

from __future__ import annotations

from collections.abc import Sequence

from cts.core.types import Evidence, GoldDraft, Nugget
from cts.text.tokens import content_tokens, normalize, split_sentences


def unsupported_claims(answer: str, evidence: Sequence[Evidence], support: float) -> tuple[str, ...]:
    """Sentences of ``answer`` that no single evidence document supports lexically.

    Args:
        answer: The search backend's answer.
        evidence: Every document of the run.
        support: Minimum share of a sentence's content tokens that one
            document (title + snippet) must contain for the sentence to count
            as supported.

    Returns:
        The unsupported sentences, in answer order (sentences without content
        tokens are never reported).
    """
    docs = [set(content_tokens(f"{e.title} {e.snippet}")) for e in evidence]
    out: list[str] = []
    for sentence in split_sentences(answer):
        tokens = set(content_tokens(sentence))
        if not tokens:
            continue
        best = max((len(tokens & doc) / len(tokens) for doc in docs), default=0.0)
        if best < support:
            out.append(sentence)
    return tuple(out)


class RuleExtractor:
    """Non-LLM baseline extractor: lead sentences of the top evidence documents.

    Nuggets are the sentences (``cts.text.tokens.split_sentences``, CJK-aware) of the
    first ``max_docs`` evidence documents that yield any sentence, in search-rank
    order, skipping fragments with fewer than ``min_tokens`` content tokens and
    repeated sentences. The k-th kept sentence of a document gets
    ``weights[min(k, len(weights) - 1)]`` (default: lead sentence 3, second 2,
    rest 1) and cites that document's evidence id. ``must_cover`` is the
    ``fused_query`` itself (one required sub-question: the rule cannot
    decompose intents); ``missing_evidence`` is empty; ``unsupported_claims``
    are answer sentences failing :func:`unsupported_claims`.
    """

    def __init__(
        self,
        max_nuggets: int = 6,
        max_docs: int = 1,
        weights: Sequence[int] = (3, 2, 1),
        min_tokens: int = 3,
        support: float = 0.5,
    ) -> None:
        """Configure the rules (keys of ``conf/extractor/rules.yaml``).

        Args:
            max_nuggets: Cap on nuggets per gold.
            max_docs: How many evidence documents to take sentences from.
            weights: Weight by sentence position in a document's lead; the last
                value applies to all later sentences. Each in 1..3.
            min_tokens: Sentences with fewer content tokens are skipped.
            support: Token share threshold of :func:`unsupported_claims`.
        """
        weights = tuple(weights)
        if not weights or any(type(w) is not int or not 1 <= w <= 3 for w in weights):
            raise ValueError(f"weights must be ints in 1..3, got {weights!r}")
        if max_nuggets < 1 or max_docs < 1 or min_tokens < 1:
            raise ValueError("max_nuggets, max_docs and min_tokens must be >= 1")
        if not 0.0 <= support <= 1.0:
            raise ValueError(f"support must be in [0, 1], got {support}")
        self.max_nuggets = max_nuggets
        self.max_docs = max_docs
        self.weights = weights
        self.min_tokens = min_tokens
        self.support = support

    def _weight(self, position: int) -> int:
        return self.weights[min(position, len(self.weights) - 1)]

    def _sentences(self, doc: Evidence) -> list[str]:
        return [s for s in split_sentences(doc.snippet) if len(content_tokens(s)) >= self.min_tokens]

    def nuggets(self, evidence: Sequence[Evidence]) -> tuple[Nugget, ...]:
        """Lead-sentence nuggets of the top documents (ids ``n1``, ``n2``, ...)."""
        out: list[Nugget] = []
        seen: set[str] = set()
        docs = 0
        for doc in evidence:
            if docs == self.max_docs or len(out) == self.max_nuggets:
                break
            kept = 0
            for sentence in self._sentences(doc):
                key = normalize(sentence)
                if key in seen or len(out) == self.max_nuggets:
                    continue
                seen.add(key)
                out.append(Nugget(f"n{len(out) + 1}", sentence, self._weight(kept), (doc.id,)))
                kept += 1
            docs += kept > 0
        return tuple(out)

    async def extract(self, fused_query: str, answer: str, evidence: Sequence[Evidence]) -> GoldDraft:
        """Build a gold draft from the evidence (see the class docstring).

        Args:
            fused_query: The intent query ``q*``.
            answer: The gold run's answer (only checked for unsupported claims).
            evidence: The run's evidence, in search-rank order.

        Returns:
            The draft; no nuggets when no document has a usable sentence.
        """
        return GoldDraft(
            nuggets=self.nuggets(evidence),
            must_cover=(fused_query,),
            missing_evidence=(),
            unsupported_claims=unsupported_claims(answer, evidence, self.support),
        )
