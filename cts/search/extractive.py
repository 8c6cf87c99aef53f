"""Extractive search: a non-LLM baseline standing in for deep search.

It runs one BM25 search over the offline corpus and answers with the top
passages verbatim. It cannot plan, browse or synthesise, so it measures what
plain lexical retrieval restores, not what a deep-search agent would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cts.core.types import Evidence, SearchResult
from cts.text.tokens import split_sentences

if TYPE_CHECKING:
    from cts.corpus.index import CorpusIndex, Hit

PASSAGE_SEP = "\n\n"


def _sentence_prefix(passage: str, max_chars: int) -> str:
    """Longest prefix of ``passage`` that ends at a sentence end and fits ``max_chars``."""
    best, pos = "", 0
    for sentence in split_sentences(passage):
        start = passage.find(sentence, pos)
        if start < 0:
            break
        pos = start + len(sentence)
        if pos > max_chars:
            break
        best = passage[:pos]
    return best


def _hard_cut(text: str, max_chars: int) -> str:
    """Cut at the last word boundary within ``max_chars`` (a CJK run has none: cut anywhere)."""
    cut = text[:max_chars]
    head = cut.rsplit(" ", 1)[0] if " " in cut and len(text) > max_chars else cut
    return head.rstrip()


def bounded_answer(passages: Sequence[str], max_chars: int) -> str:
    """Concatenate passages, bounded to ``max_chars``, cutting at sentence ends.

    Passages are added whole while they fit; the first one that does not fit
    contributes its longest fitting run of sentences. A first passage whose
    opening sentence alone is too long is cut at a word boundary instead.
    """
    parts: list[str] = []
    used = 0
    for passage in passages:
        sep = len(PASSAGE_SEP) if parts else 0
        room = max_chars - used - sep
        if room <= 0:
            break
        piece = passage if len(passage) <= room else _sentence_prefix(passage, room)
        if not piece and not parts:
            piece = _hard_cut(passage, room)
        if piece:
            parts.append(piece)
            used += sep + len(piece)
        if len(piece) < len(passage):
            break
    return PASSAGE_SEP.join(parts)


def _trace(query: str, top_k: int, hits: Sequence[Hit]) -> dict[str, Any]:
    return {
        "tool": "search",
        "query": query,
        "k": top_k,
        "hits": [{"id": h.doc.id, "title": h.doc.title, "score": round(h.score, 4)} for h in hits],
    }


class ExtractiveSearch:
    """Non-LLM search baseline: top BM25 passages of the offline corpus as the answer."""

    def __init__(self, index: CorpusIndex, top_k: int = 3, max_chars: int = 1500) -> None:
        """Create the backend.

        Args:
            index: BM25 index of the offline corpus (the composition layer builds it once per job).
            top_k: Number of documents retrieved and cited as evidence.
            max_chars: Upper bound on the answer length in characters.
        """
        if top_k < 1 or max_chars < 1:
            raise ValueError("top_k and max_chars must be positive")
        self.index = index
        self.top_k = top_k
        self.max_chars = max_chars

    async def search(self, query: str) -> SearchResult:
        """Retrieve the top documents for ``query`` and answer with their text.

        Args:
            query: The (rewritten, blurred or fused) query.

        Returns:
            The bounded extractive answer with one evidence item per hit;
            ``end_reason`` is ``no_hits`` (and the answer empty) when nothing matched.
        """
        hits = self.index.search(query, self.top_k)
        passages = [f"{h.doc.title}: {h.doc.text}" for h in hits]
        evidence = tuple(Evidence(id=h.doc.id, source=h.doc.url, title=h.doc.title, snippet=h.doc.text) for h in hits)
        summary = {
            "calls": 1,
            "searches": 1,
            "visits": 0,
            "hits": len(hits),
            "top_ids": [h.doc.id for h in hits],
        }
        return SearchResult(
            answer=bounded_answer(passages, self.max_chars),
            answer_rule="extractive",
            end_reason="answer" if hits else "no_hits",
            evidence=evidence,
            trace=(_trace(query, self.top_k, hits),),
            summary=summary,
        )
