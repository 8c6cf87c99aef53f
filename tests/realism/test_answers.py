"""The stated rule for an informative answer (people's and the UA's alike), token F1, leaks: English and Chinese."""

from __future__ import annotations

import pytest

from cts.realism.answers import content_f1, is_informative, leaked_tokens


@pytest.mark.parametrize(
    ("answer", "question", "informative"),
    [
        ("", "", False),
        ("unknown", "", False),
        ("Unknown.", "", False),
        ("no", "do you want pet shops", False),  # a bare refusal names nothing
        ("No thank you!", "", False),
        ("no, I don't want pet shops", "do you want pet shops", False),  # it only repeats the question
        ("i dont know", "", False),
        ("I'm not sure", "", False),
        ("this is not related to my search", "", False),
        ("this isnt related to my query", "", False),
        ("maybe", "", False),
        ("it doesn't matter", "", False),
        ("yes", "do you want pictures", True),  # the offered option confirmed
        ("yes i am", "", True),
        ("no i want reviews", "do you want pet shops", True),  # a negation that names what is wanted
        ("the fruit", "the fruit or the tree", True),  # an offered option chosen
        ("costa rica", "which country", True),
        ("不知道", "", False),
        ("随便", "", False),
        ("不是", "", False),
        ("是的", "", True),
        ("北京", "您问的是哪个地区？", True),
        ("不，我想看八达岭", "您想了解历史吗？", True),
    ],
)
def test_informative_rule(answer: str, question: str, informative: bool):
    assert is_informative(answer, question) is informative


def test_content_f1_known_values():
    assert content_f1("costa rica", "Costa Rica") == 1.0
    assert content_f1("costa rica frogs", "costa rica") == pytest.approx(0.8)  # p=2/3, r=1
    assert content_f1("北京", "北京市") == pytest.approx(2 / 3)  # bigrams {北京} vs {北京, 京市}
    assert content_f1("the", "costa rica") == 0.0  # no content token
    assert content_f1("unknown", "yes") == 0.0


def test_leaked_tokens_are_in_neither_intent_nor_question():
    assert leaked_tokens("costa rica", "glass frogs of Costa Rica", "which country") == frozenset()
    assert leaked_tokens("panama", "glass frogs of Costa Rica", "which country") == {"panama"}
    assert leaked_tokens("Pennsylvania", "tours of Pennsylvania's mountains", "which state") == frozenset()
    assert leaked_tokens("北京", "长城在北京的旅游路线", "哪个地区") == frozenset()
    assert leaked_tokens("上海", "长城在北京的旅游路线", "哪个地区") == {"上海"}
