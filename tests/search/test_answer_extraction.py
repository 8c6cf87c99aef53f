"""Table-driven tests of answer extraction from assistant turns (cts.search.answer)."""

from __future__ import annotations

import pytest

from cts.search.answer import ExtractedAnswer, extract_answer, strip_reasoning

CASES = [
    # (id, assistant turns, expected answer, expected rule)
    ("tag", ["<think>x</think>\n<answer>Paris</answer>"], "Paris", "answer_tag"),
    ("tag_multiline", ["<answer>\n1. A\n2. B\n</answer>"], "1. A\n2. B", "answer_tag"),
    ("tag_last_pair_wins", ["<answer>draft</answer> then <answer>final</answer>"], "final", "answer_tag"),
    ("tag_cjk", ["<think>想一想</think><answer>巴黎是法国的首都。</answer>"], "巴黎是法国的首都。", "answer_tag"),
    (
        "tag_in_final_turn_only",
        ["<answer>early</answer>", "<think>t</think><answer>late</answer>"],
        "late",
        "answer_tag",
    ),
    ("unclosed", ["<think>t</think>\n<answer>Paris is the capital"], "Paris is the capital", "unclosed_tag"),
    ("unclosed_after_complete_is_complete", ["<answer>a</answer> <answer>b"], "a", "answer_tag"),
    (
        "lone_close_after_think",
        ["<think>reason</think>\nThe answer is Paris.</answer>"],
        "The answer is Paris.",
        "lone_close",
    ),
    ("lone_close_missing_open_think", ["reasoning only</think>Paris</answer>"], "Paris", "lone_close"),
    ("lone_close_after_tool_response", ["</tool_response>\nFinal: Paris</answer>"], "Final: Paris", "lone_close"),
    ("lone_close_bare", ["Paris</answer>"], "Paris", "lone_close"),
    ("no_tags", ["<think>hmm</think>\nParis is the capital of France."], "Paris is the capital of France.", "no_tags"),
    ("no_tags_dangling_think_close", ["reasoning here</think>\n\nParis."], "Paris.", "no_tags"),
    (
        "no_tags_drops_tool_call",
        ['<think>t</think>\nLet me check.\n<tool_call>{"name": "search"}</tool_call>'],
        "Let me check.",
        "no_tags",
    ),
    (
        "no_tags_falls_back_to_earlier_turn",
        ["Earlier statement.", "<think>only thinking</think>"],
        "Earlier statement.",
        "no_tags",
    ),
    ("unclosed_think_is_not_an_answer", ["<think>cut off mid thought"], "", "empty"),
    ("empty_turns", ["", "   "], "", "empty"),
    ("no_turns", [], "", "empty"),
]


@pytest.mark.parametrize(("turns", "answer", "rule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_extract_answer(turns, answer, rule):
    assert extract_answer(turns) == ExtractedAnswer(answer, rule)


def test_only_the_final_turn_is_searched_for_tags():
    # A tag in an earlier assistant turn (say, a quoted example) does not end the search there.
    turns = ["<think>format: <answer>x</answer></think><tool_call>{}</tool_call>", "Plain final words."]
    assert extract_answer(turns) == ExtractedAnswer("Plain final words.", "no_tags")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>a</think>b", "b"),
        ("<think>a</think>b<think>c</think>d", "bd"),
        ("x</think>y", "y"),
        ("<think>open", ""),
        ("<tool_call>{}</tool_call>", ""),
        ('keep <tool_call>{"a": 1}', "keep"),
    ],
)
def test_strip_reasoning(text, expected):
    assert strip_reasoning(text) == expected
