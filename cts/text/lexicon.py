"""Place lexicons: a built-in list (English + Chinese) and the offline corpus's place names.

The one home of place logic: question typing, the rule roles, the demo miner and the
backbone-stability analysis all read places from here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cts.corpus.wiki import Corpus, place_names
from cts.text.tokens import is_cjk

BUILTIN_PLACES_EN: tuple[str, ...] = (
    "Africa",
    "Antarctica",
    "Asia",
    "Australia",
    "Europe",
    "North America",
    "South America",
    "Oceania",
    "Latin America",
    "Middle East",
    "Scandinavia",
    "Argentina",
    "Brazil",
    "Canada",
    "China",
    "Egypt",
    "England",
    "France",
    "Germany",
    "Greece",
    "India",
    "Indonesia",
    "Iran",
    "Iraq",
    "Ireland",
    "Israel",
    "Italy",
    "Japan",
    "Kenya",
    "Korea",
    "Mexico",
    "Netherlands",
    "New Zealand",
    "Nigeria",
    "Norway",
    "Pakistan",
    "Poland",
    "Portugal",
    "Russia",
    "Scotland",
    "Singapore",
    "South Africa",
    "Spain",
    "Sweden",
    "Switzerland",
    "Taiwan",
    "Thailand",
    "Ukraine",
    "United Kingdom",
    "United States",
    "USA",
    "US",
    "UK",
    "Vietnam",
    "Wales",
    "Beijing",
    "Berlin",
    "Boston",
    "California",
    "Chicago",
    "Hong Kong",
    "London",
    "Los Angeles",
    "Madrid",
    "Moscow",
    "Mumbai",
    "New York",
    "Paris",
    "Rome",
    "Shanghai",
    "Sydney",
    "Texas",
    "Tokyo",
    "Toronto",
    "Washington",
    "Shenzhen",
    "Guangzhou",
)
BUILTIN_PLACES_ZH: tuple[str, ...] = (
    "中国",
    "美国",
    "日本",
    "韩国",
    "英国",
    "法国",
    "德国",
    "俄罗斯",
    "印度",
    "加拿大",
    "澳大利亚",
    "意大利",
    "西班牙",
    "巴西",
    "新加坡",
    "欧洲",
    "亚洲",
    "非洲",
    "北美",
    "南美",
    "大洋洲",
    "东南亚",
    "中东",
    "北京",
    "上海",
    "天津",
    "重庆",
    "广州",
    "深圳",
    "杭州",
    "南京",
    "武汉",
    "成都",
    "西安",
    "苏州",
    "香港",
    "澳门",
    "台湾",
    "河北",
    "山西",
    "辽宁",
    "吉林",
    "黑龙江",
    "江苏",
    "浙江",
    "安徽",
    "福建",
    "江西",
    "山东",
    "河南",
    "湖北",
    "湖南",
    "广东",
    "海南",
    "四川",
    "贵州",
    "云南",
    "陕西",
    "甘肃",
    "青海",
    "内蒙古",
    "广西",
    "西藏",
    "宁夏",
    "新疆",
)
"""A small built-in place lexicon (continents, large countries, cities, Chinese provinces)."""


ZH_PLACES_RULES: tuple[str, ...] = tuple(
    (
        "北京 上海 天津 重庆 河北 山西 辽宁 吉林 黑龙江 江苏 浙江 安徽 福建 江西 山东 河南 湖北 湖南 广东 海南 "
        "四川 贵州 云南 陕西 甘肃 青海 台湾 内蒙古 广西 西藏 宁夏 新疆 香港 澳门 广州 深圳 杭州 南京 武汉 成都 "
        "西安 苏州 青岛 厦门 长沙 郑州 沈阳 大连 哈尔滨 昆明 合肥 福州 济南 宁波 无锡 中国 美国 日本 英国 法国 "
        "德国 俄罗斯 韩国 印度 加拿大 澳大利亚 欧洲 亚洲 非洲 北美 南美 全国 国内 海外"
    ).split()
)
"""Places the rule UA reads from Chinese intents (no word boundaries, so a lexicon rather
than a suffix pattern, which over-matches); includes 全国/国内/海外 as region answers."""


def place_pattern(places: Sequence[str]) -> re.Pattern[str]:
    """A regex matching any of ``places`` as a whole word (CJK names as substrings).

    Args:
        places: Place names; longer names win over their prefixes.
    """
    ordered = sorted({p for p in places if p}, key=len, reverse=True)
    # \w-boundaries keep "Chinatown" or "Parisian" from matching; CJK text has no word
    # boundaries (CJK counts as \w), so Chinese names match as substrings.
    latin = "|".join(re.escape(p) for p in ordered if not is_cjk(p))
    cjk = "|".join(re.escape(p) for p in ordered if is_cjk(p))
    parts = ([rf"(?<![\w-])(?:{latin})(?![\w-])"] if latin else []) + ([f"(?:{cjk})"] if cjk else [])
    return re.compile("|".join(parts) or r"(?!x)x")


def corpus_places(corpus: Corpus) -> tuple[str, ...]:
    """Place names of ``corpus`` longer than two characters (see :func:`cts.corpus.wiki.place_names`).

    Callers cache it per job (it scans every document).
    """
    return tuple(sorted(n for n in place_names(corpus) if len(n) > 2))


@dataclass(frozen=True)
class PlaceLexicon:
    """The place names a rule role reads region answers from (built once per job by the composition layer)."""

    names: tuple[str, ...]

    @classmethod
    def of_corpus(cls, corpus: Corpus) -> PlaceLexicon:
        """The places of ``corpus`` (see :func:`corpus_places`)."""
        return cls(corpus_places(corpus))
