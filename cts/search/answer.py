"""Answer extraction from a ReAct agent's assistant turns (pure functions).

The candidate answer is read from assistant text only, never from tool
responses (a page that happens to contain ``<answer>`` must not become the
answer). Rules, tried in order on the final assistant turn:

``answer_tag``
    ``<answer>...</answer>``: the last complete pair.
``unclosed_tag``
    ``<answer>`` without a closing tag (generation cut off): the rest of the text.
``lone_close``
    only ``</answer>`` (the model or a chat template ate the opening tag): the
    text before it, after the last ``</think>`` or ``</tool_response>``.
``no_tags``
    none of the above: the text with ``<think>`` blocks and tool calls removed;
    when the final turn is empty once stripped, the latest assistant turn that is not.
``empty``
    nothing usable in any assistant turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

AnswerRule = Literal["answer_tag", "unclosed_tag", "lone_close", "no_tags", "empty"]

_OPEN, _CLOSE = "<answer>", "</answer>"
_COMPLETE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_TOOL_CALL_BLOCK = re.compile(r"<tool_call>.*?(?:</tool_call>|\Z)", re.DOTALL)
_LONE_CLOSE_START = ("</think>", "</tool_response>")


@dataclass(frozen=True)
class ExtractedAnswer:
    """An extracted answer and the rule that produced it."""

    text: str
    rule: AnswerRule


def extract_answer(assistant_texts: Sequence[str]) -> ExtractedAnswer:
    """Extract the final answer from the agent's assistant turns.

    Args:
        assistant_texts: The assistant messages of one run, in order (tool
            responses must not be included).

    Returns:
        The answer text (stripped) and which rule matched.
    """
    if not assistant_texts:
        return ExtractedAnswer("", "empty")
    tagged = _from_tags(assistant_texts[-1])
    if tagged is not None:
        return tagged
    for text in reversed(assistant_texts):
        plain = strip_reasoning(text)
        if plain:
            return ExtractedAnswer(plain, "no_tags")
    return ExtractedAnswer("", "empty")


def _from_tags(text: str) -> ExtractedAnswer | None:
    complete = _COMPLETE.findall(text)
    if complete:
        return ExtractedAnswer(complete[-1].strip(), "answer_tag")
    if _OPEN in text:
        return ExtractedAnswer(text.rsplit(_OPEN, 1)[1].strip(), "unclosed_tag")
    if _CLOSE in text:
        before = text.split(_CLOSE, 1)[0]
        for marker in _LONE_CLOSE_START:
            before = before.rsplit(marker, 1)[-1]
        return ExtractedAnswer(before.strip(), "lone_close")
    return None


def strip_reasoning(text: str) -> str:
    """Remove ``<think>`` blocks (closed or not) and tool calls from ``text``.

    A dangling ``</think>`` (reasoning whose opening tag is missing) drops
    everything before it.
    """
    text = _THINK_BLOCK.sub("", text)
    text = text.rsplit("</think>", 1)[-1]
    return _TOOL_CALL_BLOCK.sub("", text).strip()
