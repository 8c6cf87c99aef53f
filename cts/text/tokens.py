"""Language-aware text utilities shared by every text path (BM25, judge, roles).

Latin-script text is split into lower-cased word tokens; runs of CJK characters
are split into overlapping character bigrams (a single character stays a
unigram), the usual dictionary-free tokenisation for Chinese retrieval.
"""

from __future__ import annotations

import re
import unicodedata

# CJK Unified Ideographs (+ Ext A, compatibility), Hiragana/Katakana, Hangul.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK}]+")
CJK_CHAR = re.compile(f"[{_CJK}]")
_WORD = f"(?:(?![{_CJK}])[^\\W_])+"
_TOKEN = re.compile(f"[{_CJK}]+|{_WORD}(?:['’]{_WORD})?", re.UNICODE)
_SENT_END = re.compile(f"(?<=[.!?])\\s+(?=[\"'“(\\[]?[A-Z0-9{_CJK}])|(?<=[。！？；])")

_ABBREV_END = re.compile(r"(?:\b[A-Z]|\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|Prof|vs|c|ca|approx|No|Vol|Gen|Col|Lt|Mt|U\.S))\.$")

STOPWORDS_EN = frozenset(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers him his how i if in into is
    it its itself just me more most my no nor not of off on once only or other our out
    over own same she should so some such than that the their them then there these they
    this those through to too under until up very was we were what when where which while
    who whom why will with would you your yours s t can't don't tell know known give show
    please overview explain describe""".split()
)
STOPWORDS_ZH = frozenset(
    "的 了 是 在 和 与 及 或 吗 呢 吧 啊 哪 些 什么 怎么 如何 哪些 哪个 为什么 请问 介绍 一下 关于 有关 "
    "这个 那个 一个 我 你 他 她 它 们 想 知道 请 说说 讲讲".split()
)


def is_cjk(text: str) -> bool:
    """Whether ``text`` contains any CJK character."""
    return bool(_CJK_RUN.search(text))


def language(text: str) -> str:
    """Crude language id: ``zh`` when the text has CJK characters, else ``en``."""
    return "zh" if is_cjk(text) else "en"


def normalize(text: str) -> str:
    """NFKC-normalise, lower-case and collapse white space."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def _cjk_bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def tokenize(text: str, *, drop_stopwords: bool = False) -> list[str]:
    """Split text into word tokens (Latin) and character bigrams (CJK).

    Args:
        text: Any text, mixed scripts allowed.
        drop_stopwords: Remove English stopwords and Chinese function words.

    Returns:
        Tokens in order of appearance (duplicates kept).
    """
    tokens: list[str] = []
    for m in _TOKEN.finditer(normalize(text)):
        tok = m.group(0)
        if _CJK_RUN.fullmatch(tok):
            if drop_stopwords:
                tok = _strip_zh_stopwords(tok)
            for part in tok.split(" "):
                if part:
                    tokens.extend(_cjk_bigrams(part))
        elif not (drop_stopwords and tok in STOPWORDS_EN):
            tokens.append(tok)
    return tokens


def _strip_zh_stopwords(run: str) -> str:
    # Longest function words first so that 什么 is removed before 什.
    for w in sorted(STOPWORDS_ZH, key=len, reverse=True):
        run = run.replace(w, " ")
    return run


def content_tokens(text: str) -> list[str]:
    """Tokens without stopwords: the units the lexical judge and rules match on."""
    return tokenize(text, drop_stopwords=True)


def split_sentences(text: str) -> list[str]:
    """Split text into sentences at Latin and CJK sentence ends.

    A break needs white space followed by an upper-case letter or digit, so
    decimals never split; fragments ending in an initial (``J.``) or a common
    abbreviation (``Dr.``, ``c.``) are joined back.
    """
    out: list[str] = []
    for part in _SENT_END.split(text.strip()):
        part = part.strip()
        if not part:
            continue
        if out and _ABBREV_END.search(out[-1]):
            out[-1] = f"{out[-1]} {part}"
        else:
            out.append(part)
    return out
