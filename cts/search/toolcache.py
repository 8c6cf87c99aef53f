"""Cache of tool results (search hits, visited-page summaries).

Like LLM responses, tool results are content-addressed so that a rerun replays
the same evidence without network or LLM calls and the jobs of a sweep share
the orig arm's work. The key is ``(source, tool, normalised arguments)``:
queries and visit goals are NFKC-normalised, lower-cased and white-space
collapsed (urls are kept: their paths are case-sensitive), and the key object
is serialised as canonical JSON with sorted keys. The store is a :class:`cts.llm.cache.ResponseCache`
in its own SQLite file (WAL mode, safe across the processes of a multirun), or its own
table beside the LLM cache's when ``services.llm.cache.url`` names a shared database,
and its mode follows the LLM cache's (``services.llm.cache.mode``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from cts.llm.cache import CacheMode, ResponseCache
from cts.llm.sampling import salted
from cts.text.tokens import normalize

TOOL_CACHE_FILE = "tool_cache.sqlite"
TOOL_TABLE = "tool_results"  # in a database shared with the LLM cache
_SCHEMA = 1


def search_args(query: str, k: int) -> dict[str, Any]:
    """Cache arguments of one search query: the query normalised (case, width, white space)."""
    return {"query": normalize(query), "k": k}


def visit_args(url: str, goal: str, max_page_chars: int) -> dict[str, Any]:
    """Cache arguments of one page visit: the url as is (paths are case-sensitive), the goal normalised."""
    return {"url": url.strip(), "goal": normalize(goal), "max_page_chars": max_page_chars}


class ToolCache:
    """Persistent tool-result cache with hit/miss counters.

    Args:
        path: SQLite file or store URL (``services.llm.cache.url``, shared with the LLM cache).
        mode: ``read_write``, ``read_only`` or ``off`` (as the LLM cache).
        table: Its table in the store (:data:`TOOL_TABLE` beside the LLM cache's).
    """

    def __init__(self, path: Path | str, mode: CacheMode = "read_write", table: str = "responses") -> None:
        self.store = ResponseCache(path, mode, table=table)
        self.hits = 0
        self.misses = 0

    @property
    def mode(self) -> CacheMode:
        """The store's mode."""
        return self.store.mode

    def key(self, source: str, tool: str, args: Mapping[str, Any]) -> str:
        """Cache key of one tool call (``args``: :func:`search_args`, :func:`visit_args`; the repeat index past 0)."""
        return self.store.key(salted({"v": _SCHEMA, "source": source, "tool": tool, "args": dict(args)}))

    async def get_or_compute(
        self,
        source: str,
        tool: str,
        args: Mapping[str, Any],
        compute: Callable[[], Awaitable[dict[str, Any]]],
        store: Callable[[dict[str, Any]], bool] = lambda _: True,
    ) -> tuple[dict[str, Any], bool]:
        """Return the cached result of a tool call, computing and storing it on a miss.

        Args:
            source: Provider or fetcher identity (``cache_id``).
            tool: Tool name.
            args: The call's normalised arguments.
            compute: Produces the result (a JSON-able dict) on a miss.
            store: Whether a computed result may be cached (e.g. not transient failures).

        Returns:
            The result and whether it came from the cache.
        """
        key = self.key(source, tool, args)
        value, cached = await self.store.get_or_compute(key, compute, store)
        if cached:
            self.hits += 1
        else:
            self.misses += 1
        return value, cached

    def counters(self) -> dict[str, int]:
        """Hit and miss counts since this cache was opened (for the job log)."""
        return {"tool_cache_hits": self.hits, "tool_cache_misses": self.misses}
