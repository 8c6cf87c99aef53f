"""The ReAct turn format of WebDancer: tool calls, tool responses, token estimates, hit rendering."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import json_repair

from cts._util.prompts import Prompt
from cts.core.contracts import SearchHit
from cts.core.types import Evidence
from cts.text.tokens import CJK_CHAR

if TYPE_CHECKING:
    from cts.llm import Completion

DEFAULT_STOP = ("\n<tool_response>", "<tool_response>")
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
RESULT_SEP = "\n=======\n"
"""Separator between the results of several queries or pages in one tool response."""
TOOL_CALL_ERROR = (
    'Error: the tool call is not valid JSON with a "name" and an "arguments" object. '
    'Write exactly one <tool_call>{"name": <tool name>, "arguments": {...}}</tool_call>.'
)


@dataclass(frozen=True)
class ToolCall:
    """One parsed ``<tool_call>``: ``error`` is set when it could not be understood."""

    name: str
    arguments: Mapping[str, Any]
    raw: str
    error: str | None = None


@dataclass(frozen=True)
class ToolOutput:
    """What a tool returns to the agent, and the evidence it produced."""

    content: str
    evidence: tuple[Evidence, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    errors: int = 0


def approx_tokens(text: str) -> int:
    """Cheap token estimate: one per CJK character plus one per 4 other characters."""
    cjk = len(CJK_CHAR.findall(text))
    return cjk + (len(text) - cjk + 3) // 4


def messages_tokens(messages: Sequence[Mapping[str, str]]) -> int:
    """:func:`approx_tokens` of a conversation (plus a few per message for the template)."""
    return sum(approx_tokens(m["content"]) + 4 for m in messages)


def turn_text(completion: Completion) -> str:
    """The assistant text with its reasoning put back in ``<think>`` tags.

    litellm moves a leading ``<think>...</think>`` block of an OpenAI-compatible
    reply into ``reasoning_content`` (as do servers running a reasoning parser);
    the WebDancer format keeps it in the conversation. Uses the completion's
    ``reasoning`` when the LLM layer provides it.
    """
    reasoning = getattr(completion, "reasoning", None)
    if reasoning and "</think>" not in completion.text:
        return f"<think>{reasoning}</think>{completion.text}"
    return completion.text


def restore_think(text: str) -> tuple[str, bool]:
    """Prepend a missing ``<think>`` when the text closes one (QwQ-style templates open it in the prompt)."""
    if "</think>" in text and "<think>" not in text.split("</think>", 1)[0]:
        return "<think>\n" + text.lstrip(), True
    return text, False


def parse_tool_call(text: str) -> ToolCall | None:
    """Parse the first ``<tool_call>`` of an assistant turn (JSON repaired if needed).

    Returns:
        None when the turn has no tool call; a :class:`ToolCall` with ``error``
        set when its JSON cannot be read as ``{"name": str, "arguments": object}``.
    """
    match = _TOOL_CALL.search(text.split("</think>")[-1] if "</think>" in text else text)
    if match is None:
        return None
    raw = match.group(1).strip()
    obj = loads_lenient(raw)
    if not isinstance(obj, Mapping) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return ToolCall("", {}, raw, TOOL_CALL_ERROR)
    args = obj.get("arguments", obj.get("parameters", {}))
    args = loads_lenient(args) if isinstance(args, str) else args
    if not isinstance(args, Mapping):
        return ToolCall(obj["name"], {}, raw, TOOL_CALL_ERROR)
    return ToolCall(obj["name"], dict(args), raw)


def loads_lenient(text: str) -> Any:
    """JSON of a tool call's arguments, repaired when the model wrote it loosely (None when empty)."""
    try:
        return json.loads(text)
    except ValueError:
        return json_repair.loads(text) if text.strip() else None


def render(prompt: Prompt, **values: Any) -> str:
    """Text of a one-message prompt file (human notes in ``<!-- -->`` comments dropped)."""
    return "\n\n".join(m["content"] for m in prompt.messages(**values))


def evidence_id(kind: str, *parts: str) -> str:
    """Stable evidence id: ``<kind>-`` and 8 hex digits of a hash of ``parts``."""
    return f"{kind}-{hashlib.sha1(chr(31).join(parts).encode('utf-8')).hexdigest()[:8]}"


def render_hits(query: str, hits: Sequence[SearchHit]) -> str:
    """Serper-style result block for one query: numbered ``[title](link)`` lines with snippets."""
    if not hits:
        return f"No results found for '{query}'. Try a more general query."
    lines = [f"{i}. [{h.title}]({h.link})\n{h.snippet}".rstrip() for i, h in enumerate(hits, 1)]
    return f"A search for '{query}' found {len(hits)} results:\n\n## Web Results\n" + "\n\n".join(lines)


def tool_schemas(results_per_query: int, max_queries_per_call: int) -> list[dict[str, Any]]:
    """JSON schemas of the ``search`` and ``visit`` tools, as listed in the user prompt."""
    search = {
        "name": "search",
        "description": (
            f"Performs batched web searches: supply an array 'query' (at most {max_queries_per_call}); "
            f"the tool retrieves the top {results_per_query} results for each query in one call."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Complementary search queries, searched together.",
                }
            },
            "required": ["query"],
        },
    }
    visit = {
        "name": "visit",
        "description": "Visit webpage(s) and return the summary of the content.",
        "parameters": {
            "type": "object",
            "properties": {
                "url": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The URL(s) of the webpage(s) to visit.",
                },
                "goal": {"type": "string", "description": "The information goal of the visit."},
            },
            "required": ["url", "goal"],
        },
    }
    return [search, visit]


def is_final(text: str) -> bool:
    visible = text.rsplit("</think>", 1)[-1]
    return "<answer>" in visible or "</answer>" in visible


def as_list(value: Any) -> list[str]:
    items = [value] if isinstance(value, str) else value if isinstance(value, (list, tuple)) else []
    return [str(v).strip() for v in items if str(v).strip()]


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (list, tuple)):
        return "\n".join(as_text(v) for v in value)
    return json.dumps(value, ensure_ascii=False)


class StampedTrace(list[dict[str, Any]]):
    """A run's trace: each entry gets ``t_ns``, the epoch time it was appended (the turns' span times)."""

    def append(self, entry: dict[str, Any]) -> None:  # noqa: D102 - list.append, stamped
        super().append({**entry, "t_ns": time.time_ns()})


@dataclass
class Episode:
    """Mutable state of one agent run (internal to :class:`cts.search.webdancer.WebDancerSearch`)."""

    messages: list[dict[str, str]]
    trace: list[dict[str, Any]] = field(default_factory=StampedTrace)
    evidence: dict[str, Evidence] = field(default_factory=dict)
    assistant: list[str] = field(default_factory=list)
    counts: dict[str, float] = field(default_factory=dict)
    cut_turns: int = 0
    """Agent turns in a row that stopped at the output cap."""

    def add(self, key: str, value: float = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + value

    def book(self, completion: Completion, calls_key: str) -> None:
        self.add(calls_key)
        self.add("tokens_in", completion.tokens_in)
        self.add("tokens_out", completion.tokens_out)
        self.add("cost_usd", completion.cost_usd)
