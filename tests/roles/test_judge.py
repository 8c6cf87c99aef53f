import asyncio

import pytest

from cts.core.types import Nugget
from cts.roles.lexical import LexicalJudge


def judge(answer: str, *texts: str, **kw) -> list[str]:
    ns = [Nugget(id=f"n{i}", text=t, weight=1) for i, t in enumerate(texts)]
    labels = asyncio.run(LexicalJudge(**kw).judge(answer, ns))
    return [labels[n.id] for n in ns]


def test_full_partial_none_by_token_recall():
    answer = "Mercury is the first planet from the Sun and the smallest in the Solar System."
    assert judge(
        answer,
        "Mercury is the smallest planet in the Solar System.",  # all content tokens present
        "Mercury is the first planet and has no moons or rings.",  # about half
        "Gold is a chemical element.",
    ) == ["full", "partial", "none"]


def test_chinese_nuggets_match_on_bigrams():
    answer = "长城是中国古代的军事防御工程，始建于春秋战国时期。"
    assert judge(answer, "长城是中国古代军事防御工程", "长城全长两万多千米，主要分布在北方地区") == ["full", "none"]


def test_thresholds_are_configurable_and_checked():
    answer = "alpha beta"
    assert judge(answer, "alpha beta gamma delta", full=0.5, partial=0.25) == ["full"]
    assert judge(answer, "alpha beta gamma delta", full=0.9, partial=0.6) == ["none"]
    with pytest.raises(ValueError):
        LexicalJudge(full=0.3, partial=0.5)


def test_nugget_without_content_tokens_is_none():
    assert judge("anything", "the of and") == ["none"]
