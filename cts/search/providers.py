"""Search providers for the deep-search agent's ``search`` tool.

One small interface (:class:`SearchProvider`): a query in, at most ``k``
:class:`SearchHit` out. ``local_wiki`` ranks the embedded offline corpus with
BM25 and needs nothing; ``serper`` (Google results, key from
``SERPER_API_KEY``) and ``searxng`` (a self-hosted metasearch instance) reach
the web. Every network provider takes a configurable ``base_url`` so tests can
point it at a fake server on 127.0.0.1.

Failures raise :class:`cts.core.types.CallError` (kind ``search`` or ``config``);
the agent turns them into a tool error message instead of ending the run.
Kind ``network`` marks transient failures, which the tool cache never stores.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from cts._util.secrets import redact, remember
from cts.core.contracts import SearchHit
from cts.core.types import CallError
from cts.text.tokens import split_sentences

if TYPE_CHECKING:
    from cts.corpus.index import CorpusIndex

SERPER_URL = "https://google.serper.dev/search"
NETWORK = "network"
"""Error kind of transient failures (connection, timeout, 429, 5xx): never cached."""
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class HttpPolicy:
    """Timeout and retries of a provider's HTTP requests."""

    timeout_s: float = 30.0
    max_attempts: int = 3
    """Tries on connection errors, 408, 429 and 5xx (the first one included)."""
    backoff_s: float = 1.0
    """Wait before the second try; doubled before each further one."""


class LocalWikiProvider:
    """BM25 over the embedded offline Wikipedia corpus (links ``local://<id>``).

    Args:
        index: BM25 index of the offline corpus.
        snippet_chars: Longest snippet; whole leading sentences are kept.
    """

    def __init__(self, index: CorpusIndex, snippet_chars: int = 300) -> None:
        self.index = index
        self.snippet_chars = snippet_chars

    @property
    def cache_id(self) -> str:
        """``local_wiki:<index dir>:<snippet length>``.

        The index dir names the corpus language and fingerprint and the tokeniser
        version, so cached hits never outlive a change of the ranking.
        """
        return f"local_wiki:{self.index.path.name}:{self.snippet_chars}"

    async def search(self, query: str, k: int) -> list[SearchHit]:
        """Rank the corpus for ``query`` (zero-score hits are already dropped)."""
        hits = self.index.search(query, k)
        return [SearchHit(hit.doc.title, hit.doc.url, lead_snippet(hit.doc.text, self.snippet_chars)) for hit in hits]


@functools.lru_cache(maxsize=1 << 15)
def lead_snippet(text: str, max_chars: int) -> str:
    """Leading sentences of ``text`` that fit ``max_chars`` (at least a cut first sentence).

    Cached: searches return the same articles again, in every job of a sweep.
    """
    out = ""
    for sentence in split_sentences(text):
        joined = f"{out} {sentence}".strip() if out else sentence
        if len(joined) > max_chars:
            break
        out = joined
    return out or text[:max_chars].strip()


class SerperProvider:
    """Google results through the Serper API (``POST {"q": ..., "num": k}``).

    Args:
        base_url: Endpoint to POST to.
        api_key_env: Environment variable holding the API key.
        gl: Country code (e.g. ``cn``), or None for Serper's default.
        hl: Interface language (e.g. ``zh-cn``), or None.
        settings: Timeout and retries of its requests; the config gives them as flat keys
            (``timeout_s``, ``max_attempts``, ``backoff_s``), bound into it by the builder.
    """

    def __init__(
        self,
        base_url: str = SERPER_URL,
        api_key_env: str = "SERPER_API_KEY",
        gl: str | None = None,
        hl: str | None = None,
        settings: HttpPolicy = HttpPolicy(),
    ) -> None:
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.locale = {key: val for key, val in (("gl", gl), ("hl", hl)) if val}
        self.http = settings

    @property
    def cache_id(self) -> str:
        """``serper:<url>`` plus locale (the key itself never enters the cache)."""
        return f"serper:{self.base_url}:{sorted(self.locale.items())}"

    async def search(self, query: str, k: int) -> list[SearchHit]:
        """POST the query and parse ``organic`` results."""
        key = os.environ.get(self.api_key_env)
        remember(key)  # masked if the provider echoes it (cts._util.secrets)
        if not key:
            raise CallError("config", f"search provider serper needs ${self.api_key_env}")
        headers = {"X-API-KEY": key, "Content-Type": "application/json"}
        body = {"q": query, "num": k, **self.locale}
        data = await request_json("POST", self.base_url, self.http, json=body, headers=headers)
        return parse_results(data, "organic", "link", "snippet")[:k]


class SearxngProvider:
    """A SearXNG instance's JSON API (``GET <base_url>/search?format=json``).

    The instance must list ``json`` under ``search.formats`` in its settings.

    Args:
        base_url: Root url of the instance.
        language: SearXNG ``language`` parameter (e.g. ``zh-CN``), or None.
        categories: SearXNG ``categories`` parameter.
        timeout_s: Per-request timeout.
        max_attempts: Tries on connection errors, 429 and 5xx.
        backoff_s: First wait between tries (doubled each time).
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8888",
        language: str | None = None,
        categories: str = "general",
        timeout_s: float = 30.0,
        max_attempts: int = 3,
        backoff_s: float = 1.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.params = {"format": "json", "categories": categories}
        if language:
            self.params["language"] = language
        self.http = HttpPolicy(timeout_s, max_attempts, backoff_s)

    @property
    def cache_id(self) -> str:
        """``searxng:<url>`` plus the fixed query parameters."""
        return f"searxng:{self.base_url}:{sorted(self.params.items())}"

    async def search(self, query: str, k: int) -> list[SearchHit]:
        """GET the query and parse ``results``."""
        params = {"q": query, **self.params}
        url = f"{self.base_url}/search"
        data = await request_json("GET", url, self.http, params=params)
        return parse_results(data, "results", "url", "content")[:k]


def parse_results(data: Any, list_key: str, link_key: str, snippet_key: str) -> list[SearchHit]:
    """Map a provider's JSON result list onto :class:`SearchHit` (entries without a link are skipped).

    Raises:
        CallError: ``search`` when ``data`` is not an object.
    """
    if not isinstance(data, Mapping):
        raise CallError("search", f"unexpected response body: {str(data)[:200]}")
    hits = []
    for item in data.get(list_key) or []:
        if isinstance(item, Mapping) and item.get(link_key):
            title = str(item.get("title") or item[link_key])
            hits.append(SearchHit(title, str(item[link_key]), str(item.get(snippet_key) or "")))
    return hits


async def request_json(method: str, url: str, policy: HttpPolicy, **kwargs: Any) -> Any:
    """Send one HTTP request (``kwargs`` go to httpx) and return its JSON body.

    Connection errors, 408, 429 and 5xx are retried as ``policy`` says.

    Raises:
        CallError: ``network`` when transient failures persist (never cached),
            ``search`` on another HTTP error status or a body that is not JSON.
    """
    last = ""
    attempts = max(1, policy.max_attempts)
    async with httpx.AsyncClient(timeout=policy.timeout_s) as client:
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(policy.backoff_s * 2 ** (attempt - 1))
            try:
                response = await client.request(method, url, **kwargs)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code != 200:
                raise CallError("search", f"HTTP {response.status_code} from {url}: {redact(response.text[:200])}")
            try:
                return response.json()
            except ValueError as exc:
                raise CallError("search", f"invalid JSON from {url}: {exc}") from exc
    raise CallError(NETWORK, f"{url} failed after {attempts} attempts: {last}")
