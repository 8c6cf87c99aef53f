"""Page fetchers for the deep-search agent's ``visit`` tool.

:class:`LocalCorpusFetcher` serves ``local://<id>`` urls from the embedded
corpus; :class:`HttpFetcher` downloads a web page and keeps its main text
(trafilatura strips navigation, ads and footers); :class:`RoutingFetcher`
picks one of them by url scheme. Failures raise :class:`cts.core.types.CallError`
(kind ``fetch``, or ``network`` for transient failures), which the agent
reports back as the page's content.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx

from cts.core.contracts import Fetcher, Page
from cts.core.types import CallError
from cts.search.providers import NETWORK, RETRY_STATUS

if TYPE_CHECKING:
    from cts.corpus.wiki import Corpus

_TEXT_TYPES = ("text/plain", "text/markdown")
_HTML_TYPES = ("text/html", "application/xhtml+xml")


class LocalCorpusFetcher:
    """Serves ``local://<id>`` from the offline corpus (title + full text).

    Args:
        corpus: The offline corpus.
    """

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus

    @property
    def cache_id(self) -> str:
        """``local:<corpus language>:<corpus fingerprint>``."""
        return f"local:{self.corpus.lang}:{self.corpus.fingerprint}"

    async def fetch(self, url: str) -> Page:
        """Look the document up by the id after ``local://``."""
        doc_id = url.split("://", 1)[-1].strip("/")
        try:
            doc = self.corpus.get(doc_id)
        except (KeyError, IndexError):
            doc = None
        if doc is None:
            raise CallError("fetch", f"no document {url} in the local corpus")
        return Page(url, doc.title, doc.text)


class HttpFetcher:
    """GETs a page over HTTP(S) and extracts its main text with trafilatura.

    Args:
        timeout_s: Per-request timeout.
        user_agent: ``User-Agent`` header sent with every request.
        max_bytes: Larger bodies are cut before extraction.
    """

    def __init__(
        self,
        timeout_s: float = 20.0,
        user_agent: str = "Mozilla/5.0 (compatible; cts-webdancer/0.1)",
        max_bytes: int = 5_000_000,
    ) -> None:
        self.timeout_s = timeout_s
        self.headers = {"User-Agent": user_agent}
        self.max_bytes = max_bytes

    @property
    def cache_id(self) -> str:
        """``http+trafilatura`` (the page itself is keyed by url)."""
        return "http+trafilatura"

    async def fetch(self, url: str) -> Page:
        """Download ``url`` and return its main text (plain-text bodies are kept as is)."""
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=True) as client:
                response = await client.get(url, headers=self.headers)
        except httpx.HTTPError as exc:
            raise CallError(NETWORK, f"{url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code in RETRY_STATUS:
            raise CallError(NETWORK, f"{url}: HTTP {response.status_code}")
        if response.status_code != 200:
            raise CallError("fetch", f"{url}: HTTP {response.status_code}")
        kind = response.headers.get("content-type", "text/html").split(";")[0].strip().lower()
        body = response.content[: self.max_bytes]
        if kind in _TEXT_TYPES:
            return Page(url, "", body.decode(response.encoding or "utf-8", errors="replace"))
        if kind not in _HTML_TYPES:
            raise CallError("fetch", f"{url}: unsupported content type {kind}")
        return await asyncio.to_thread(extract_main_text, url, body)


def extract_main_text(url: str, html: bytes | str) -> Page:
    """Main text and title of an HTML page (trafilatura).

    Raises:
        CallError: ``fetch`` when no main text can be found.
    """
    import trafilatura

    doc = trafilatura.bare_extraction(html, url=url, with_metadata=True, include_comments=False)
    text = (getattr(doc, "text", None) or "").strip()
    if not text:
        raise CallError("fetch", f"{url}: no main text found")
    return Page(url, getattr(doc, "title", None) or "", text)


class RoutingFetcher:
    """Chooses a fetcher by url scheme (``local``, ``http``, ``https`` ...).

    Args:
        routes: Scheme -> fetcher (built by the composition layer).
    """

    def __init__(self, routes: Mapping[str, Fetcher]) -> None:
        self.routes: dict[str, Fetcher] = dict(routes)

    @property
    def cache_id(self) -> str:
        """The routed fetchers' ids, by scheme."""
        return "route:" + ",".join(f"{s}={f.cache_id}" for s, f in sorted(self.routes.items()))

    async def fetch(self, url: str) -> Page:
        """Fetch ``url`` with the fetcher of its scheme."""
        scheme = urlsplit(url).scheme.lower()
        fetcher = self.routes.get(scheme)
        if fetcher is None:
            raise CallError("fetch", f"{url}: no fetcher for scheme {scheme!r} (have {sorted(self.routes)})")
        return await fetcher.fetch(url)
