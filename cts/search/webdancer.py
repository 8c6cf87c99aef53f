"""WebDancer-faithful deep search: a ReAct agent with ``search`` and ``visit`` tools.

The format follows the released WebDancer demo and its WebSailor successor
(Alibaba-NLP/WebAgent): a system prompt, then a user prompt that lists the
tools and ends with the question. Each assistant turn is ``<think>...</think>``
followed by one ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``;
generation stops at ``<tool_response>`` and the tool's output comes back as a
user message ``<tool_response>\\n...\\n</tool_response>``. The run ends at
``<answer>...</answer>`` (or a turn without a tool call). When the call limit
or the context limit is reached, one last message asks for the answer now.

Every search hit and every visited page becomes a citable
:class:`~cts.core.types.Evidence` whose id is derived from its url (``S-<hash>`` for
a search snippet, ``V-<hash>`` for a page read for a goal), so ids are stable
across reruns and across the runs of a sweep. Tool results are cached
(:mod:`cts.search.toolcache`), so with warm caches a rerun replays exactly
without a single network or LLM request.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cts._util.prompts import load_prompt
from cts.core.contracts import Fetcher, SearchProvider
from cts.core.types import CallError, SearchFailure, SearchResult
from cts.llm import Chat
from cts.search.answer import extract_answer
from cts.search.react import (
    DEFAULT_STOP,
    Episode,
    ToolCall,
    ToolOutput,
    is_final,
    messages_tokens,
    parse_tool_call,
    render,
    restore_think,
    tool_schemas,
    turn_text,
)
from cts.search.toolcache import ToolCache
from cts.search.webtools import FATAL_KINDS, WebTools

DEFAULT_PROMPTS = {
    "system": "webdancer_system",
    "user": "webdancer_user",
    "final": "webdancer_final",
    "summary": "visit_summary",
}
RELEASED_SUMMARY_PARAMS = {"temperature": 0.7}
"""Decoding params of WebSailor's page summariser."""
CUT_TURN = (
    "Your last turn was cut off at the length limit ({cap} tokens). Think briefly, then give "
    "exactly one <tool_call> or your <answer>."
)
"""Shown to the agent after a turn that stopped at its output cap (the cut turn stays in the conversation)."""
_LIMITS = {
    "call_limit": "the maximum number of tool calls you can make",
    "context_limit": "the maximum context length you can handle",
}


@dataclass(frozen=True)
class AgentSettings:
    """The agent's knobs (``search.*`` keys of ``conf/search/webdancer.yaml``), one frozen object.

    Defaults are those of the released demo code: ``max_llm_calls`` 50 (the WebDancer demo;
    WebSailor uses 40), a context limit of 31 * 1024 - 500 tokens, temperature 0.6, top_p 0.95,
    stop at ``<tool_response>``, 10 results per query, at most 3 queries per search call, pages
    cut at 150,000 characters before the summariser reads them.

    Attributes:
        max_llm_calls: Agent turns before the call limit is reached.
        max_context_tokens: Approximate conversation size before the context limit is reached.
        temperature: Agent sampling temperature (None = the model's default).
        top_p: Agent nucleus sampling (None = the model's default).
        max_output_tokens: Cap on tokens per agent turn (None = the server's default); a turn
            that stops at it is shown to the agent as cut, ``max_truncated_turns`` times in a row
            at most, then the run ends ``truncated`` (the arm is unscored, never parsed as complete).
        summary_max_output_tokens: Cap on tokens of one page summary.
        max_truncated_turns: Consecutive cut turns before the run ends ``truncated``.
        stop: Stop sequences of agent turns.
        results_per_query: Hits returned per search query.
        max_queries_per_call: Queries of one search call that are run (the rest are dropped).
        max_urls_per_call: Urls of one visit call that are read (None = all).
        max_page_chars: Page characters handed to the summariser.
        fallback_page_chars: Page characters returned when no summary can be extracted.
        summary_params: Decoding params of the summariser (None = temperature 0.7, as released).
        force_final_answer: Ask once more for an answer when the call or context limit is reached.
        extra_params: More decoding params for agent turns (e.g. ``repetition_penalty``).
        prompts: Prompt names for ``system``, ``user``, ``final`` and ``summary``.
    """

    max_llm_calls: int = 50
    max_context_tokens: int = 31 * 1024 - 500
    temperature: float | None = 0.6
    top_p: float | None = 0.95
    max_output_tokens: int | None = None
    summary_max_output_tokens: int | None = None
    max_truncated_turns: int = 2
    stop: Sequence[str] = DEFAULT_STOP
    results_per_query: int = 10
    max_queries_per_call: int = 3
    max_urls_per_call: int | None = None
    max_page_chars: int = 150_000
    fallback_page_chars: int = 4000
    summary_params: Mapping[str, Any] | None = None
    force_final_answer: bool = True
    extra_params: Mapping[str, Any] | None = None
    prompts: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.max_llm_calls < 1 or self.results_per_query < 1 or self.max_queries_per_call < 1:
            raise ValueError("max_llm_calls, results_per_query and max_queries_per_call must be positive")


class WebDancerSearch(WebTools):
    """ReAct deep-search agent in the WebDancer / WebSailor format.

    Args:
        model: Chat client of the model driving the agent (built from a registry entry by the
            composition layer).
        provider: Search provider.
        fetcher: Page fetcher.
        tool_cache: The job's shared cache of tool results (its counters are the job's).
        summary_model: Chat client of the model extracting evidence from visited pages (None = ``model``).
        settings: The agent's knobs; the config gives them as flat ``search.*`` keys, which the
            builder binds into this object (:func:`cts.compose.services.component_arguments`).
    """

    def __init__(
        self,
        model: Chat,
        provider: SearchProvider,
        fetcher: Fetcher,
        tool_cache: ToolCache,
        summary_model: Chat | None = None,
        settings: AgentSettings = AgentSettings(),
    ) -> None:
        s = settings
        self.settings = s
        self.agent = model.with_role("search")
        self.summariser = (summary_model or model).with_role("visit_summary")
        self.tool_cache = tool_cache
        self.provider = provider
        self.fetcher = fetcher
        self.max_llm_calls = s.max_llm_calls
        self.max_context_tokens = s.max_context_tokens
        self.results_per_query = s.results_per_query
        self.max_queries_per_call = s.max_queries_per_call
        self.max_urls_per_call = s.max_urls_per_call
        self.max_page_chars = s.max_page_chars
        self.fallback_page_chars = s.fallback_page_chars
        self.force_final_answer = s.force_final_answer
        self.max_output_tokens, self.summary_max_output_tokens = s.max_output_tokens, s.summary_max_output_tokens
        self.max_truncated_turns = s.max_truncated_turns
        sampling = {"temperature": s.temperature, "top_p": s.top_p}
        self.params = {
            **{k: v for k, v in sampling.items() if v is not None},
            "stop": list(s.stop),
            **dict(s.extra_params or {}),
        }
        self.summary_params = dict(RELEASED_SUMMARY_PARAMS if s.summary_params is None else s.summary_params)
        self.prompts = {role: load_prompt(name) for role, name in {**DEFAULT_PROMPTS, **dict(s.prompts or {})}.items()}
        self.tools: dict[str, Callable[[Episode, Mapping[str, Any]], Awaitable[ToolOutput]]] = {
            "search": self._tool_search,
            "visit": self._tool_visit,
        }
        schemas = tool_schemas(s.results_per_query, s.max_queries_per_call)
        self.tools_text = ",\n".join(json.dumps(s, ensure_ascii=False, indent=2) for s in schemas)
        self.prompt_version = "+".join(self.prompts[r].version for r in ("system", "user", "final"))

    async def search(self, query: str) -> SearchResult:
        """Run the agent on ``query`` until it answers or reaches its call or context limit.

        Args:
            query: The question (rewritten, blurred or fused query).

        Returns:
            The extracted answer with its rule, the end reason, every piece of
            evidence seen, the full trace and a compact summary.

        Raises:
            CallError: A configuration or authentication failure, or a model
                failure before the agent wrote anything (nothing to answer from).
        """
        run = Episode(self.initial_messages(query))
        run.trace.append(
            {
                "type": "prompt",
                "messages": [dict(m) for m in run.messages],
                "prompt_version": self.prompt_version,
                "model": self.agent.spec.name,
            }
        )
        failure = None
        try:
            end_reason = await self._loop(run)
        except CallError as exc:
            if exc.kind in FATAL_KINDS or not run.assistant:
                raise
            end_reason = "error"
            failure = SearchFailure(exc.kind, exc.message, exc.endpoint)
            run.trace.append({"type": "error", "kind": exc.kind, "message": exc.message, "endpoint": exc.endpoint})
        answer = extract_answer(run.assistant)
        run.trace.append({"type": "end", "end_reason": end_reason, "answer_rule": answer.rule})
        return SearchResult(
            answer=answer.text,
            answer_rule=answer.rule,
            end_reason=end_reason,
            evidence=tuple(run.evidence.values()),
            trace=tuple(run.trace),
            summary=self._summary(run, end_reason, answer.rule),
            failure=failure,
        )

    def initial_messages(self, query: str) -> list[dict[str, str]]:
        """The system message and the user message listing the tools and asking ``query``."""
        system = render(self.prompts["system"])
        user = render(self.prompts["user"], tools=self.tools_text, question=query)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    async def _loop(self, run: Episode) -> str:
        while True:
            if run.counts.get("llm_calls", 0) >= self.max_llm_calls:
                return await self._force_final(run, "call_limit")
            text = await self._agent_turn(run)
            if run.cut_turns:
                if run.cut_turns > self.max_truncated_turns:
                    return "truncated"
                run.messages.append({"role": "user", "content": CUT_TURN.format(cap=self.max_output_tokens)})
                continue
            call = None if is_final(text) else parse_tool_call(text)
            if call is None:
                return "answer"
            output = await self._run_tool(run, call)
            run.messages.append({"role": "user", "content": f"<tool_response>\n{output.content}\n</tool_response>"})
            if messages_tokens(run.messages) > self.max_context_tokens:
                return await self._force_final(run, "context_limit")

    async def _agent_turn(self, run: Episode) -> str:
        completion = await self.agent.complete(
            list(run.messages),
            prompt_version=self.prompt_version,
            max_output_tokens=self.max_output_tokens,
            **self.params,
        )
        run.book(completion, "llm_calls")
        run.cut_turns = run.cut_turns + 1 if completion.truncated else 0
        # Servers that ignore stop sequences run on into an imagined tool response.
        text, restored = restore_think(turn_text(completion).split("<tool_response>", 1)[0])
        text = text.strip()
        run.messages.append({"role": "assistant", "content": text})
        run.assistant.append(text)
        run.trace.append(
            {
                "type": "llm",
                "turn": int(run.counts["llm_calls"]),
                "text": text,
                "think_restored": restored,
                "tokens_in": completion.tokens_in,
                "tokens_out": completion.tokens_out,
                "cost_usd": completion.cost_usd,
                "cached": completion.cached,
                "latency_s": completion.latency_s,
                "finish_reason": completion.finish_reason,
                "tokens_reasoning": completion.tokens_reasoning,
            }
        )
        return text

    async def _force_final(self, run: Episode, reason: str) -> str:
        if not self.force_final_answer:
            return reason
        note = render(self.prompts["final"], limit=_LIMITS[reason])
        last = run.messages[-1]
        # Over the context limit the last tool response goes (as in WebSailor);
        # out of calls it stays, since the agent has not read it yet.
        replace = reason == "context_limit" and last["role"] == "user" and len(run.messages) > 2
        if last["role"] == "user":
            last["content"] = note if replace else f"{last['content']}\n\n{note}"
        else:
            run.messages.append({"role": "user", "content": note})
        run.trace.append({"type": "final_prompt", "reason": reason, "content": note, "replaced_tool_response": replace})
        await self._agent_turn(run)
        return reason

    async def _run_tool(self, run: Episode, call: ToolCall) -> ToolOutput:
        turn = int(run.counts.get("llm_calls", 0))
        run.add("tool_calls")
        run.trace.append(
            {
                "type": "tool_call",
                "turn": turn,
                "name": call.name,
                "arguments": dict(call.arguments),
                "raw": call.raw,
                "error": call.error,
            }
        )
        tool = self.tools.get(call.name)
        if call.error is not None:
            output = ToolOutput(call.error, errors=1)
        elif tool is None:
            known = ", ".join(self.tools)
            output = ToolOutput(f"Error: unknown tool {call.name!r}. Available tools: {known}.", errors=1)
        else:
            output = await tool(run, call.arguments)
        for ev in output.evidence:
            run.evidence.setdefault(ev.id, ev)
        run.add("tool_errors", output.errors)
        run.trace.append(
            {
                "type": "tool_result",
                "turn": turn,
                "name": call.name,
                "content": output.content,
                "evidence_ids": list(dict.fromkeys(e.id for e in output.evidence)),
                **output.details,
            }
        )
        return output

    def _summary(self, run: Episode, end_reason: str, answer_rule: str) -> dict[str, Any]:
        counts = {
            key: int(run.counts.get(key, 0))
            for key in (
                "llm_calls",
                "summary_calls",
                "tool_calls",
                "searches",
                "visits",
                "tool_errors",
                "tool_cache_hits",
                "tokens_in",
                "tokens_out",
            )
        }
        return {
            **counts,
            "cost_usd": round(run.counts.get("cost_usd", 0.0), 6),
            "context_tokens": messages_tokens(run.messages),
            "evidence": len(run.evidence),
            "end_reason": end_reason,
            "answer_rule": answer_rule,
        }
