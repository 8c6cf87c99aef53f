"""Lexical coverage judge: an honest, deterministic non-LLM baseline for Prompt E."""

from __future__ import annotations

from collections.abc import Sequence

from cts.core.types import Label, Nugget
from cts.text.tokens import content_tokens


class LexicalJudge:
    """Labels a nugget by the recall of its content tokens in the answer.

    CJK text is matched on character bigrams (see :func:`cts.text.tokens.tokenize`), so
    the judge works on the Chinese benchmark too.
    """

    def __init__(self, full: float = 0.8, partial: float = 0.4) -> None:
        """Args:
        full: Minimum token recall for ``full``.
        partial: Minimum token recall for ``partial``.
        """
        if not 0.0 < partial <= full <= 1.0:
            raise ValueError(f"need 0 < partial <= full <= 1, got partial={partial}, full={full}")
        self.full = full
        self.partial = partial

    def label(self, answer_tokens: set[str], nugget: Nugget) -> Label:
        """Label one nugget against the answer's token set."""
        tokens = set(content_tokens(nugget.text))
        if not tokens:
            return "none"
        recall = len(tokens & answer_tokens) / len(tokens)
        if recall >= self.full:
            return "full"
        return "partial" if recall >= self.partial else "none"

    async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]:
        """Label every nugget of one answer."""
        answer_tokens = set(content_tokens(answer))
        return {n.id: self.label(answer_tokens, n) for n in nuggets}
