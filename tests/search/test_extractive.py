"""The extractive (non-LLM) search backend."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cts.compose.services import Services
from cts.core.contracts import SearchBackend
from cts.core.types import SearchResult
from cts.corpus.index import load_or_build_index
from cts.corpus.wiki import Corpus, Doc, doc_id
from cts.search.extractive import ExtractiveSearch, bounded_answer


def _search(backend: ExtractiveSearch, query: str) -> SearchResult:
    return asyncio.run(backend.search(query))


def _services_over(docs: list[Doc], tmp_path: Path) -> Services:
    services = Services(cache_dir=tmp_path)
    corpus = Corpus.from_docs(docs, lang="xx")
    services.memo("index", lambda: load_or_build_index(corpus, tmp_path))
    return services


def test_is_a_search_backend(services: Services) -> None:
    assert isinstance(ExtractiveSearch(services.index), SearchBackend)
    with pytest.raises(ValueError):
        ExtractiveSearch(services.index, top_k=0)


@pytest.mark.parametrize("max_chars", [120, 600, 1500])
def test_answer_is_bounded_and_cites_every_hit(services: Services, max_chars: int) -> None:
    result = _search(ExtractiveSearch(services.index, top_k=3, max_chars=max_chars), "Mercury, the planet")
    assert 0 < len(result.answer) <= max_chars
    assert result.answer.startswith("Mercury (planet): ")
    ids = [e.id for e in result.evidence]
    assert ids[0] == "Mercury_(planet)" and len(ids) == 3
    assert result.summary == {"calls": 1, "searches": 1, "visits": 0, "hits": 3, "top_ids": ids}
    assert [h["id"] for h in result.trace[0]["hits"]] == ids
    assert result.trace[0]["query"] == "Mercury, the planet"
    first = result.evidence[0]
    assert first.source == "local://Mercury_(planet)" and first.title == "Mercury (planet)"
    assert first.snippet == services.corpus.get("Mercury_(planet)").text  # type: ignore[union-attr]
    assert (result.answer_rule, result.end_reason) == ("extractive", "answer")


def test_answer_concatenates_top_passages_when_they_fit(tmp_path: Path) -> None:
    docs = [
        Doc(doc_id("Alpha"), "Alpha", "Alpha is a zebra word. It has two sentences.", "", "T"),
        Doc(doc_id("Beta"), "Beta", "Beta mentions a zebra once.", "", "T"),
    ]
    backend = ExtractiveSearch(_services_over(docs, tmp_path).index, top_k=2, max_chars=1000)
    result = _search(backend, "zebra")
    by_id = {d.id: d for d in docs}
    ranked = [by_id[e.id] for e in result.evidence]
    assert sorted(d.id for d in ranked) == ["Alpha", "Beta"]
    assert result.answer.split("\n\n") == [f"{d.title}: {d.text}" for d in ranked]


def test_no_hits_gives_an_empty_answer(services: Services) -> None:
    result = _search(ExtractiveSearch(services.index), "qqqzzzxxv")
    assert (result.answer, result.end_reason, result.evidence) == ("", "no_hits", ())
    assert result.summary["hits"] == 0


def test_bounded_answer_cuts_at_sentence_ends() -> None:
    passages = ["A: One one. Two two. Three three.", "B: Four four."]
    assert bounded_answer(passages, 1000) == "A: One one. Two two. Three three.\n\nB: Four four."
    assert bounded_answer(passages, 25) == "A: One one. Two two."
    assert bounded_answer(passages, 40) == "A: One one. Two two. Three three."


def test_bounded_answer_hard_cuts_a_too_long_first_sentence() -> None:
    answer = bounded_answer(["T: " + "word " * 100], 50)
    assert 0 < len(answer) <= 50 and answer.endswith("word")


def test_bounded_answer_handles_chinese() -> None:
    passage = "长城：长城是古代的防御工程。它东起山海关。它西至嘉峪关。"
    assert bounded_answer([passage], 21) == "长城：长城是古代的防御工程。它东起山海关。"
    assert bounded_answer([passage], 20) == "长城：长城是古代的防御工程。"
    assert len(bounded_answer([passage * 3], 10)) == 10
