"""Question typing: which ambiguity dimension(s) a clarification question asks about.

Types are multi-label: ``region``, ``time``, ``scope`` (entity, sense, which work
or which one), ``definition`` (criterion, metric, meaning); ``other`` when none
match. A question is *region-only* when its types are exactly ``("region",)``,
the paper's low-yield failure mode (Tables 5, 8, 10).

The default typer is lexical (English and Chinese cue lexicons, no model):

* Only *interrogative* cues count ("which country", "哪个城市", "when"), never a
  place or year that merely occurs in the question: "Which period of Rome's
  history?" asks about time, not region, although it names a place.
* Single Chinese characters such as 市 or 省 are never cues on their own (they
  over-match 市场, 超市, 上市, 省钱, 节省); only multi-character cues and
  interrogative patterns (哪个省, 哪座城市, 省份) are.
* Generic "which one / do you mean / 具体 / 指的是" phrasing marks ``scope`` only
  when nothing else matched, so "您指的是哪个城市？" stays region-only.
* "which X" / "哪个X" asks about scope unless X is a region or time noun.
* Quoted spans (“...”, "...", 「...」) echo the user's query and are ignored:
  "Which “Basque Country” do you mean?" asks about scope, not region.

The typer roles (lexicon, LLM) live in :mod:`cts.roles.qtyper`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from cts.text.lexicon import BUILTIN_PLACES_EN, BUILTIN_PLACES_ZH, place_pattern

QTYPES: tuple[str, ...] = ("region", "time", "scope", "definition", "other")
_TYPED = QTYPES[:-1]

# Nouns that make "which X" a region or time question rather than a scope one.
_EN_REGION_NOUNS = (
    r"countr(?:y|ies)|cit(?:y|ies)|states?|provinces?|regions?|locations?|places?|"
    r"continents?|territor(?:y|ies)|municipalit(?:y|ies)|counties|county|districts?|towns?|"
    r"neighbou?rhoods?|part of the (?:world|country)"
)
_EN_TIME_NOUNS = (
    r"years?|periods?|time|times|decades?|centur(?:y|ies)|eras?|months?|dates?|days?|quarters?|"
    r"dynast(?:y|ies)|seasons? of the year"
)
# Words between "which" and its noun ("which specific city") that say nothing themselves.
_EN_QUALIFIERS = r"geograph\w*|specific|particular|exact|precise|of\s+the\s+following|one\s+of"
_ZH_REGION_NOUNS = (
    "城市|国家|省(?!钱|时|略|事|力|心)|市(?!场|值|面|价|民)|地区|地方|地点|区域|县|区(?!别|分)|"
    "州|洲|国(?!画|学)|片区|里|儿"
)
_ZH_TIME_NOUNS = "年|月|天|时|季度|朝代|世纪|阶段|届|个时间|段时间"

_EN_CUES: Mapping[str, tuple[str, ...]] = {
    "region": (
        r"\bwhere\b",
        r"\bregion(?:s|al|ally)?\b",
        r"\blocations?\b",
        r"\blocated\b",
        r"\bcountr(?:y|ies)\b",
        r"\bcit(?:y|ies)\b",
        r"\bprovinces?\b",
        r"\bgeograph\w*",
        r"\bcontinents?\b",
        r"\bnationwide\b",
        r"\bworldwide\b",
        r"\bglobal(?:ly)?\b",
        r"\binternational(?:ly)?\b",
        r"\b(?:geographic(?:al)?|local|metropolitan|urban|rural) areas?\b",
        r"\barea of the (?:world|country)\b",
        rf"\b(?:which|what|in which|in what)\s+(?:{_EN_REGION_NOUNS})\b",
    ),
    "time": (
        r"\bwhen\b(?!\s+you\s+(?:say|said|mention|refer|talk|ask|write))",
        r"\btime\s*(?:frame|period|span|range|window)\b",
        r"\bwhat time\b",
        r"\b(?:periods?|eras?|decades?|centur(?:y|ies)|dynast(?:y|ies))\b",
        r"\byears?\b",
        r"\bdates?\b",
        r"\bmonths?\b",
        r"\b(?:recent|current|currently|latest|upcoming|historical|nowadays|today)\b",
        r"\b(?:this|last|next|past) (?:year|month|decade|week)\b",
        r"\b(?:1[5-9]|20)\d{2}s?\b",
        rf"\b(?:which|what|in which|in what)\s+(?:{_EN_TIME_NOUNS})\b",
    ),
    "scope": (
        rf"\bwhich\s+(?!(?:{_EN_REGION_NOUNS}|{_EN_TIME_NOUNS}|{_EN_QUALIFIERS})\b)\w+",
        r"\bwhat\s+(?:kind|type|sort|aspects?|versions?|genre|field|subject|topic|part)\b",
        r"\b(?:which|what) (?:aspect|sense)\b",
        r"\bwho\b",
        r"\bwhose\b",
        r"\bby whom\b",
        r"\b(?:authors?|creators?|editions?|versions?)\b",
    ),
    "definition": (
        r"\bdefin\w*",
        r"\bcriteri(?:on|a)\b",
        r"\bmetrics?\b",
        r"\bmeasur\w*",
        r"\bstandards?\b",
        r"\bthresholds?\b",
        r"\bmean by\b",
        r"\bwhat (?:do|did) you mean\b",
        r"\bmeaning\b",
        r"\binterpret\w*",
        r"\b(?:what|which) counts as\b",
        r"\bcounts? as\b",
        r"\bconsidered (?:as )?\w+\b",
        r"\bin terms of\b",
        r"\bbased on\b",
        r"\bby what\b",
        r"\bhow (?:do|would|should|to) (?:you |we )?(?:define|judge|rank|measure|count|evaluate|compare)\b",
        r"\brank(?:ing|ed)\b",
    ),
}
_EN_WEAK_SCOPE: tuple[str, ...] = (
    r"\bwhich\b",
    r"\bdo you mean\b",
    r"\brefer(?:ring)? to\b",
    r"\bspecific(?:ally)?\b",
    r"\bparticular\b",
    r"\bscope\b",
    r"\bfocus\b",
)

_ZH_CUES: Mapping[str, tuple[str, ...]] = {
    "region": (
        "哪里",
        "哪儿",
        "在哪",
        "什么地方",
        "哪个地方",
        "哪些地方",
        "何地",
        "何处",
        "地区",
        "地域",
        "地点",
        "地理",
        "区域",
        "位置",
        "城市",
        "省份",
        "省市",
        "国家或地区",
        "国内",
        "国外",
        "海外",
        "境内",
        "境外",
        "全国",
        "全球",
        "本地",
        "当地",
        "异地",
        rf"(?:哪|什么|哪一)(?:个|座|些)?(?:{_ZH_REGION_NOUNS})",
    ),
    "time": (
        "什么时候",
        "何时",
        "时间",
        "时期",
        "时段",
        "时候",
        "年份",
        "年代",
        "年度",
        "朝代",
        "世纪",
        "日期",
        "月份",
        "季度",
        "近期",
        "最近",
        "最新",
        "目前",
        "当前",
        "现在",
        "今年",
        "去年",
        "明年",
        "近几年",
        "近年",
        "历年",
        "历史上",
        r"\d{2,4}\s*年",
        rf"(?:哪|什么|哪一)(?:个|些)?(?:{_ZH_TIME_NOUNS})",
    ),
    "scope": (
        rf"哪(?:一)?(?:个|种|类|些|位|家|部|本|款|所|支|项|条|首|场|方面)(?!{_ZH_REGION_NOUNS}|{_ZH_TIME_NOUNS})",
        "什么方面",
        "哪方面",
        "哪些方面",
        "什么类型",
        "什么样的",
        "哪种",
        "谁",
        "作者",
        "品牌",
        "型号",
        "版本",
        "类型",
        "种类",
        "类别",
        "哪一部",
        "哪一款",
    ),
    "definition": (
        "定义",
        "标准",
        "指标",
        "衡量",
        "口径",
        "准则",
        "依据",
        "界定",
        "怎么算",
        "如何算",
        "算作",
        "算不算",
        "什么意思",
        "(?<!哪种)含义",
        "排名",
        "排行",
        "评判",
        "判断标准",
        "以什么为准",
        "怎样理解",
        "如何理解",
    ),
}
_ZH_WEAK_SCOPE: tuple[str, ...] = ("具体", "指的是", "是指", "指哪", "范围", "对象", "哪")


def _compile(patterns: Sequence[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


_STRONG: Mapping[str, re.Pattern[str]] = {t: _compile((*_EN_CUES[t], *_ZH_CUES[t])) for t in _TYPED}
_WEAK_SCOPE = _compile((*_EN_WEAK_SCOPE, *_ZH_WEAK_SCOPE))

_PLACE = place_pattern(BUILTIN_PLACES_EN + BUILTIN_PLACES_ZH)
# Case-sensitive on purpose: "US" is a place, "us" is not.
_PLACE_CHOICE = re.compile(
    rf"(?:{_PLACE.pattern})[^?？,，。]{{0,12}}?(?:\b[Oo]r\b|\bvs\.?|\bversus\b|还是|或者|或)\s*"
    rf"(?:the\s+)?(?:{_PLACE.pattern})"
)


# Quoted spans echo the user's query ("Which “Basque Country” do you mean?"): they say
# what the question is about, not which dimension it asks for.
_QUOTED = re.compile(r"“[^”]*”|\"[^\"]*\"|「[^」]*」|『[^』]*』|‘[^’]*’")


@functools.lru_cache(maxsize=8192)  # a pure function of the text; a sweep's jobs type the same questions again
def classify_question(question: str) -> tuple[str, ...]:
    """Return the ambiguity types a clarification question asks about (lexicon rules).

    Args:
        question: One clarification question (English, Chinese or mixed).

    Returns:
        The matching types in :data:`QTYPES` order; ``("other",)`` when none match.
    """
    frame = _QUOTED.sub(" ", question)
    found = {t for t in _TYPED if _STRONG[t].search(frame)}
    if _PLACE_CHOICE.search(question):  # "China or the US?", "北京还是上海？"
        found.add("region")
    if not found and _WEAK_SCOPE.search(frame):
        found.add("scope")
    return tuple(t for t in _TYPED if t in found) or ("other",)


def is_region_only(types: Sequence[str]) -> bool:
    """Whether a question's types are exactly ``region``."""
    return tuple(types) == ("region",)


def normalize_types(labels: Sequence[str]) -> tuple[str, ...]:
    """Canonical form of a label set: known types in :data:`QTYPES` order, ``other`` alone.

    Raises:
        ValueError: A label is not one of :data:`QTYPES`, or the set is empty.
    """
    clean = {str(x).strip().lower() for x in labels}
    bad = clean - set(QTYPES)
    if bad or not clean:
        raise ValueError(f"question types must be a non-empty subset of {QTYPES}, got {sorted(labels)}")
    typed = tuple(t for t in _TYPED if t in clean)
    return typed or ("other",)
