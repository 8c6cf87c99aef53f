"""Contract tests of the search providers and page fetchers.

``local_wiki`` and the local fetcher run on the real offline corpus; Serper,
SearXNG and the HTTP fetcher run against fake servers on 127.0.0.1 (this
module's :class:`FakeHTTP`, also used by ``test_webdancer``).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import pytest
from omegaconf import OmegaConf

from cts.compose.app import build_node
from cts.core.contracts import Page, SearchHit, SearchProvider
from cts.core.types import CallError
from cts.search.fetchers import HttpFetcher, LocalCorpusFetcher, extract_main_text
from cts.search.providers import HttpPolicy, LocalWikiProvider, SearxngProvider, SerperProvider, lead_snippet
from tests.search.fakes import ARTICLE, FakeHTTP


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- local_wiki (real corpus) ---------------------------------------------------------------


def test_local_wiki_ranks_the_corpus_with_local_links(services):
    provider = LocalWikiProvider(services.index, snippet_chars=200)
    assert isinstance(provider, SearchProvider)
    hits = run(provider.search("Mercury planet closest to the Sun", 5))
    assert 0 < len(hits) <= 5
    for hit in hits:
        doc = services.corpus.get(hit.link.removeprefix("local://"))
        assert hit.link == f"local://{doc.id}" and hit.title == doc.title
        assert len(hit.snippet) <= 200 and doc.text.startswith(hit.snippet[:50])
    assert any("Mercury" in h.title for h in hits)
    assert provider.cache_id.startswith("local_wiki:")


def test_local_wiki_splits_an_article_into_sentences_once(services, monkeypatch):
    """Once per process: the jobs of a sweep (a provider each) share the articles' lead snippets."""
    from cts.search import providers

    providers.lead_snippet.cache_clear()
    first = run(LocalWikiProvider(services.index, snippet_chars=200).search("Mercury planet closest to the Sun", 5))
    splits: list[str] = []
    real = providers.split_sentences
    monkeypatch.setattr(providers, "split_sentences", lambda text: splits.append(text) or real(text))
    provider = LocalWikiProvider(services.index, snippet_chars=200)  # another job's
    again = run(provider.search("Mercury planet closest to the Sun", 5))
    assert again == first and splits == []
    other = run(provider.search("Venus second planet", 5))
    assert len(splits) == len({h.link for h in other} - {h.link for h in first}) > 0
    real_snippet = providers.lead_snippet.__wrapped__
    assert [h.snippet for h in other] == [real_snippet(services.corpus.get(h.link[8:]).text, 200) for h in other]


def test_local_wiki_returns_nothing_rather_than_zero_score_hits(services):
    provider = LocalWikiProvider(services.index)
    assert run(provider.search("水星是离太阳最近的行星", 3)) == []  # CJK query, English corpus
    assert run(provider.search("zzqxv qqzzx", 3)) == []


def test_lead_snippet_keeps_whole_sentences_and_cuts_a_long_first_one():
    text = "First sentence here. Second one follows. Third is long enough to overflow."
    assert lead_snippet(text, 45) == "First sentence here. Second one follows."
    assert lead_snippet("x" * 50, 10) == "x" * 10
    assert lead_snippet("北京是中国的首都。上海是最大的城市。", 10) == "北京是中国的首都。"


def test_local_fetcher_serves_local_urls(services):
    doc = services.corpus.docs[0]
    page = run(LocalCorpusFetcher(services.corpus).fetch(doc.url))
    assert page == Page(doc.url, doc.title, doc.text)
    with pytest.raises(CallError) as err:
        run(LocalCorpusFetcher(services.corpus).fetch("local://No_Such_Article_zz"))
    assert err.value.kind == "fetch"


# --- Serper ---------------------------------------------------------------------------------

SERPER_BODY = {
    "organic": [
        {
            "title": "Paris - Wikipedia",
            "link": "https://en.wikipedia.org/wiki/Paris",
            "snippet": "Paris is the capital.",
        },
        {"title": "No snippet", "link": "https://example.org/a"},
        {"title": "No link"},
        {"title": "巴黎", "link": "https://zh.wikipedia.org/wiki/巴黎", "snippet": "巴黎是法国首都。"},
    ]
}


def test_serper_request_shape_key_header_and_parsing(fake_http, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "k-123")
    url = fake_http.route("POST", "/search", (200, "application/json", json.dumps(SERPER_BODY)))
    hits = run(SerperProvider(base_url=url, hl="zh-cn").search("capital of France", 10))
    assert hits == [
        SearchHit("Paris - Wikipedia", "https://en.wikipedia.org/wiki/Paris", "Paris is the capital."),
        SearchHit("No snippet", "https://example.org/a", ""),
        SearchHit("巴黎", "https://zh.wikipedia.org/wiki/巴黎", "巴黎是法国首都。"),
    ]
    (seen,) = fake_http.seen
    assert seen.headers["X-API-KEY"] == "k-123"
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.json() == {"q": "capital of France", "num": 10, "hl": "zh-cn"}


def test_serper_truncates_to_k_and_tolerates_no_organic(fake_http, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "k")
    url = fake_http.route("POST", "/search", (200, "application/json", json.dumps(SERPER_BODY)))
    assert len(run(SerperProvider(base_url=url).search("q", 1))) == 1
    fake_http.route("POST", "/search", (200, "application/json", "{}"))
    assert run(SerperProvider(base_url=url).search("q", 5)) == []


def test_serper_without_key_is_a_config_error(fake_http, monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    url = fake_http.route("POST", "/search", (200, "application/json", "{}"))
    with pytest.raises(CallError) as err:
        run(SerperProvider(base_url=url).search("q", 3))
    assert err.value.kind == "config" and "SERPER_API_KEY" in err.value.message
    assert fake_http.seen == []


def test_serper_retries_5xx_then_succeeds(fake_http, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "k")
    replies = iter([(503, "text/plain", "busy"), (200, "application/json", json.dumps(SERPER_BODY))])
    url = fake_http.route("POST", "/search", lambda seen: next(replies))
    hits = run(SerperProvider(base_url=url, settings=HttpPolicy(backoff_s=0)).search("q", 10))
    assert len(hits) == 3 and len(fake_http.seen) == 2


@pytest.mark.parametrize(
    ("status", "body", "kind", "requests"),
    [
        (403, "forbidden", "search", 1),  # client errors are not retried
        (200, "<html>not json</html>", "search", 1),
        (500, "boom", "network", 3),  # transient: retried, then reported as network
    ],
)
def test_serper_errors(fake_http, monkeypatch, status, body, kind, requests):
    monkeypatch.setenv("SERPER_API_KEY", "k")
    url = fake_http.route("POST", "/search", (status, "application/json", body))
    with pytest.raises(CallError) as err:
        run(SerperProvider(base_url=url, settings=HttpPolicy(max_attempts=3, backoff_s=0)).search("q", 3))
    assert err.value.kind == kind
    assert len(fake_http.seen) == requests


def test_unreachable_server_is_a_network_error(monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "k")
    with FakeHTTP() as server:
        url = server.url + "/search"
    with pytest.raises(CallError) as err:  # the server is gone: connection refused
        run(SerperProvider(base_url=url, settings=HttpPolicy(max_attempts=2, backoff_s=0, timeout_s=2)).search("q", 3))
    assert err.value.kind == "network"


def test_cache_ids_identify_endpoint_and_locale_not_key(monkeypatch):
    a = SerperProvider(base_url="http://127.0.0.1:1/search", gl="cn")
    b = SerperProvider(base_url="http://127.0.0.1:1/search", gl="us")
    assert a.cache_id != b.cache_id
    monkeypatch.setenv("SERPER_API_KEY", "secret-value")
    assert "secret-value" not in a.cache_id
    assert SearxngProvider(base_url="http://h:1/").cache_id != SearxngProvider(base_url="http://h:2").cache_id


# --- SearXNG --------------------------------------------------------------------------------

SEARX_BODY = {
    "results": [
        {"title": "Paris", "url": "https://example.org/paris", "content": "Capital of France."},
        {"title": "", "url": "https://example.org/untitled", "content": None},
        {"title": "no url", "content": "skipped"},
    ]
}


def test_searxng_request_shape_and_parsing(fake_http):
    fake_http.route("GET", "/search", (200, "application/json", json.dumps(SEARX_BODY)))
    provider = SearxngProvider(base_url=fake_http.url + "/", language="zh-CN")
    hits = run(provider.search("法国 首都", 10))
    assert hits == [
        SearchHit("Paris", "https://example.org/paris", "Capital of France."),
        SearchHit("https://example.org/untitled", "https://example.org/untitled", ""),
    ]
    (seen,) = fake_http.seen
    assert seen.method == "GET" and seen.path == "/search"
    assert seen.query == {"q": ["法国 首都"], "format": ["json"], "categories": ["general"], "language": ["zh-CN"]}
    assert len(run(provider.search("x", 1))) == 1


def test_searxng_without_json_format_is_a_search_error(fake_http):
    fake_http.route("GET", "/search", (403, "text/html", "Forbidden"))
    with pytest.raises(CallError) as err:
        run(SearxngProvider(base_url=fake_http.url).search("q", 3))
    assert err.value.kind == "search" and "403" in err.value.message


# --- HTTP fetcher (trafilatura) -------------------------------------------------------------


def test_http_fetcher_extracts_main_text(fake_http):
    url = fake_http.route("GET", "/paris", (200, "text/html; charset=utf-8", ARTICLE))
    page = run(HttpFetcher(user_agent="cts-test").fetch(url))
    assert page.url == url and page.title
    assert "capital and largest city of France" in page.text
    assert "巴黎是法国的首都" in page.text
    assert "Copyright footer" not in page.text and "Menu item" not in page.text
    assert fake_http.seen[0].headers["User-Agent"] == "cts-test"


def test_http_fetcher_keeps_plain_text_and_follows_redirects(fake_http):
    fake_http.route("GET", "/plain", (200, "text/plain; charset=utf-8", "just text 中文"))
    old = fake_http.route("GET", "/old", (302, "text/plain", "", {"Location": "/plain"}))
    page = run(HttpFetcher().fetch(old))
    assert page.text == "just text 中文" and page.title == ""
    assert [s.path for s in fake_http.seen] == ["/old", "/plain"]


@pytest.mark.parametrize(
    ("status", "kind", "body", "expected"),
    [
        (404, "text/html", "missing", "fetch"),
        (503, "text/html", "busy", "network"),
        (200, "application/pdf", "%PDF-1.4", "fetch"),
        (200, "text/html", "<html><body></body></html>", "fetch"),  # no main text
    ],
)
def test_http_fetcher_errors(fake_http, status, kind, body, expected):
    url = fake_http.route("GET", "/p", (status, kind, body))
    with pytest.raises(CallError) as err:
        run(HttpFetcher().fetch(url))
    assert err.value.kind == expected


def test_extract_main_text_is_pure():
    page = extract_main_text("http://x/y", ARTICLE)
    assert "river Seine" in page.text


def test_routing_fetcher_dispatches_by_scheme(services, fake_http):
    url = fake_http.route("GET", "/paris", (200, "text/html", ARTICLE))
    node = OmegaConf.create(
        {
            "_target_": "cts.search.fetchers.RoutingFetcher",
            "routes": {
                "local": {"_target_": "cts.search.fetchers.LocalCorpusFetcher"},
                "http": {"_target_": "cts.search.fetchers.HttpFetcher", "timeout_s": 5},
            },
        }
    )
    fetcher = build_node(node, services)  # the composition layer builds the routes, then the router
    assert isinstance(fetcher.routes["local"], LocalCorpusFetcher)
    assert "river Seine" in run(fetcher.fetch(url)).text
    doc = services.corpus.docs[1]
    assert run(fetcher.fetch(doc.url)).text == doc.text
    with pytest.raises(CallError) as err:
        run(fetcher.fetch("ftp://example.org/file"))
    assert err.value.kind == "fetch" and "ftp" in err.value.message
