"""The agent's two tools, ``search`` and ``visit``: cached, over its provider, fetcher and page summariser.

A mixin of :class:`~cts.search.webdancer.WebDancerSearch` (it reads the agent's provider,
fetcher, caches, summariser and limits): the tools apart from the ReAct loop that calls them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from cts._util.prompts import Prompt
from cts.core.contracts import Chat, Fetcher, SearchHit, SearchProvider
from cts.core.types import CallError, Evidence
from cts.search.providers import NETWORK
from cts.search.react import (
    RESULT_SEP,
    Episode,
    ToolOutput,
    as_list,
    as_text,
    evidence_id,
    loads_lenient,
    render,
    render_hits,
)
from cts.search.toolcache import ToolCache, search_args, visit_args
from cts.text.tokens import normalize

FATAL_KINDS = frozenset({"config", "auth"})
"""Error kinds that abort the run instead of being reported to the agent (a missing key)."""


def _storable(value: Mapping[str, Any]) -> bool:
    return not value.get("transient")


class WebTools:
    """``search`` and ``visit`` as the released agent runs them (mixed into the agent)."""

    # What the tools read of the agent they are mixed into (set by WebDancerSearch.__init__).
    provider: SearchProvider
    fetcher: Fetcher
    tool_cache: ToolCache
    summariser: Chat
    results_per_query: int
    max_queries_per_call: int
    max_urls_per_call: int | None
    max_page_chars: int
    fallback_page_chars: int
    summary_max_output_tokens: int | None
    summary_params: dict[str, Any]
    prompts: dict[str, Prompt]

    async def _tool_search(self, run: Episode, args: Mapping[str, Any]) -> ToolOutput:
        queries = as_list(args.get("query"))[: self.max_queries_per_call]
        if not queries:
            return ToolOutput("[search] Invalid request: 'query' must be a non-empty array of strings.", errors=1)
        results = await asyncio.gather(*(self._search_one(q) for q in queries))
        run.add("searches", len(queries))
        blocks, evidence, errors = [], [], 0
        for query, (value, _) in zip(queries, results):
            if "error" in value:
                blocks.append(f"[search] Search for '{query}' failed: {value['error']}")
                errors += 1
                continue
            hits = [SearchHit(**h) for h in value["hits"]]
            blocks.append(render_hits(query, hits))
            evidence += [Evidence(evidence_id("S", h.link), h.link, h.title, h.snippet) for h in hits]
        cached = [c for _, c in results]
        run.add("tool_cache_hits", sum(cached))
        details = {"queries": queries, "cached": cached}
        return ToolOutput(RESULT_SEP.join(blocks), tuple(evidence), details, errors)

    async def _search_one(self, query: str) -> tuple[dict[str, Any], bool]:
        async def compute() -> dict[str, Any]:
            try:
                hits = await self.provider.search(query, self.results_per_query)
            except CallError as exc:
                if exc.kind in FATAL_KINDS:
                    raise
                return {"error": exc.message, "kind": exc.kind, "transient": exc.kind == NETWORK}
            return {"hits": [{"title": h.title, "link": h.link, "snippet": h.snippet} for h in hits]}

        key_args = search_args(query, self.results_per_query)
        return await self.tool_cache.get_or_compute(
            self.provider.cache_id, "search", key_args, compute, store=_storable
        )

    async def _tool_visit(self, run: Episode, args: Mapping[str, Any]) -> ToolOutput:
        urls = as_list(args.get("url"))[: self.max_urls_per_call or None]
        goal = str(args.get("goal") or "").strip()
        if not urls or not goal:
            return ToolOutput("[visit] Invalid request: give 'url' (an array of urls) and a 'goal'.", errors=1)
        results = await asyncio.gather(*(self._visit_one(u, goal) for u in urls))
        run.add("visits", len(urls))
        evidence, pages = [], []
        for url, (value, cached) in zip(urls, results):
            if not cached:
                for key, amount in value.get("usage", {}).items():
                    run.add(key, amount)
            eid = evidence_id("V", url, normalize(goal)) if value["ok"] else None
            if eid:
                evidence.append(Evidence(eid, url, value["title"] or url, value["snippet"]))
            pages.append({"url": url, "evidence_id": eid, "rule": value["rule"], "cached": cached})
        run.add("tool_cache_hits", sum(c for _, c in results))
        errors = sum(1 for v, _ in results if not v["ok"])
        content = RESULT_SEP.join(v["content"] for v, _ in results)
        return ToolOutput(content, tuple(evidence), {"goal": goal, "pages": pages}, errors)

    async def _visit_one(self, url: str, goal: str) -> tuple[dict[str, Any], bool]:
        async def compute() -> dict[str, Any]:
            try:
                page = await self.fetcher.fetch(url)
            except CallError as exc:
                if exc.kind in FATAL_KINDS:
                    raise
                return {
                    "ok": False,
                    "rule": "error",
                    "content": f"[visit] Failed to read page {url}: {exc.message}",
                    "transient": exc.kind == NETWORK,
                }
            return await self._read_page(url, page.title, page.text[: self.max_page_chars], goal)

        route = self.summariser.route  # the model actually called
        source = "|".join(
            (
                self.fetcher.cache_id,
                route.model,
                str(route.api_base),
                self.prompts["summary"].version,
                json.dumps(self.summary_params, sort_keys=True),
            )
        )
        key_args = {**visit_args(url, goal, self.max_page_chars), "fallback_chars": self.fallback_page_chars}
        return await self.tool_cache.get_or_compute(source, "visit", key_args, compute, store=_storable)

    async def _read_page(self, url: str, title: str, text: str, goal: str) -> dict[str, Any]:
        extracted, usage, transient = await self._summarise(text, goal)
        head = f"The useful information in {url} for user goal {goal} as follows: \n\n"
        if extracted is None:
            page = text[: self.fallback_page_chars]
            content = f"{head}No summary could be extracted; the page begins:\n{page}"
            return {
                "ok": True,
                "rule": "fallback",
                "title": title,
                "content": content,
                "snippet": page,
                "usage": usage,
                "transient": transient,
            }
        evidence, summary = as_text(extracted.get("evidence")), as_text(extracted.get("summary"))
        content = f"{head}Evidence in page: \n{evidence}\n\nSummary: \n{summary}\n\n"
        return {
            "ok": True,
            "rule": "summary",
            "title": title,
            "content": content,
            "snippet": evidence or summary,
            "usage": usage,
            "transient": False,
        }

    async def _summarise(self, text: str, goal: str) -> tuple[Mapping[str, Any] | None, dict[str, float], bool]:
        """Ask the summary model for ``{"rational", "evidence", "summary"}`` (repaired JSON)."""
        prompt = self.prompts["summary"]
        messages = [{"role": "user", "content": render(prompt, webpage_content=text, goal=goal)}]
        try:
            completion = await self.summariser.complete(
                messages,
                prompt_version=prompt.version,
                max_output_tokens=self.summary_max_output_tokens,
                **self.summary_params,
            )
        except CallError as exc:
            if exc.kind in FATAL_KINDS:
                raise
            return None, {}, True
        usage = {
            "summary_calls": 1,
            "tokens_in": completion.tokens_in,
            "tokens_out": completion.tokens_out,
            "cost_usd": completion.cost_usd,
        }
        parsed = None if completion.truncated else loads_lenient(completion.text)  # a cut JSON is no summary
        if isinstance(parsed, Mapping) and (parsed.get("evidence") or parsed.get("summary")):
            return parsed, usage, False
        return None, usage, False
