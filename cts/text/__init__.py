"""Text handling for English and CJK: tokens and sentences (``tokens``), place lexicons, question types."""

from cts.text.tokens import (
    CJK_CHAR,
    STOPWORDS_EN,
    STOPWORDS_ZH,
    content_tokens,
    is_cjk,
    language,
    normalize,
    split_sentences,
    tokenize,
)

__all__ = [
    "CJK_CHAR",
    "STOPWORDS_EN",
    "STOPWORDS_ZH",
    "content_tokens",
    "is_cjk",
    "language",
    "normalize",
    "split_sentences",
    "tokenize",
]
