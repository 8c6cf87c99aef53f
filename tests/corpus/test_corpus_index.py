"""Offline corpus loading and the cached BM25 index (real corpus + tiny synthetic ones)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from cts.corpus.index import (
    SETTINGS_FILE,
    BM25Params,
    atomic_dir,
    index_dir,
    load_or_build_index,
    tokenizer_version,
)
from cts.corpus.wiki import Corpus, Doc, doc_id, load_corpus


def _doc(title: str, text: str, description: str = "", topic: str = "Test") -> Doc:
    return Doc(id=doc_id(title), title=title, text=text, description=description, topic=topic)


@pytest.fixture()
def tiny() -> Corpus:
    return Corpus.from_docs(
        [
            _doc("Apple", "The apple is a round fruit of the apple tree."),
            _doc("Banana", "The banana is an elongated edible fruit."),
            _doc("Twin two", "Identical lexical content about zebras."),
            _doc("Twin one", "Identical lexical content about zebras."),
        ],
        lang="xx",
    )


@pytest.fixture()
def chinese() -> Corpus:
    return Corpus.from_docs(
        [
            _doc("长城", "长城是中国古代的军事防御工程，东起山海关，西至嘉峪关。"),
            _doc("故宫", "故宫是明清两代的皇家宫殿，位于北京中轴线的中心。"),
            _doc("黄河", "黄河是中国第二长河，全长约五千四百六十四公里，流经九个省区。"),
        ],
        lang="zh",
    )


def test_corpus_loads_every_doc_with_unique_ids() -> None:
    corpus = load_corpus("en-us")
    assert len(corpus) == 10033
    assert len({d.id for d in corpus.docs}) == len(corpus)
    planet = corpus.by_title("Mercury (planet)")
    assert planet is not None and planet.id == "Mercury_(planet)"
    assert corpus.get("Mercury_(planet)") is planet
    assert planet.url == "local://Mercury_(planet)"
    assert planet.text and planet.description
    assert "New York (state)" in [d.title for d in corpus.docs if d.topic == "Geography"]
    assert len(corpus.fingerprint) == 12
    assert load_corpus("en-us") is corpus  # parsed once per process


def test_unknown_corpus_language_is_a_clear_error() -> None:
    with pytest.raises(FileNotFoundError, match="summaries_en-us.json"):
        load_corpus("xx-xx")


def test_corpus_rejects_duplicate_ids() -> None:
    with pytest.raises(ValueError, match="unique"):
        Corpus.from_docs([_doc("A b", "x"), _doc("A_b", "y")], lang="xx")


def test_fingerprint_follows_content(tiny: Corpus) -> None:
    changed = Corpus.from_docs([*tiny.docs[:-1], _doc("Twin one", "different")], lang="xx")
    assert Corpus.from_docs(tiny.docs, lang="xx").fingerprint == tiny.fingerprint
    assert changed.fingerprint != tiny.fingerprint


def test_real_index_round_trip_gives_identical_results(tmp_path: Path) -> None:
    corpus = load_corpus("en-us")
    built = load_or_build_index(corpus, tmp_path)
    loaded = load_or_build_index(corpus, tmp_path)
    assert built.built and not loaded.built
    assert built.path == loaded.path == index_dir(corpus, tmp_path)
    queries = ["Mercury planet", "Psycho 1960 film", "Jin dynasty 266", "Republic by Plato"]
    for q in queries:
        a = [(h.doc.id, h.score) for h in built.search(q, 10)]
        assert a == [(h.doc.id, h.score) for h in loaded.search(q, 10)]
        assert len(a) == 10
    assert built.search("Mercury, the planet", 1)[0].doc.id == "Mercury_(planet)"
    settings = json.loads((built.path / SETTINGS_FILE).read_text())
    assert settings["tokenizer_version"] == tokenizer_version()
    assert settings["drop_stopwords"] is True
    assert settings["bm25"] == {"k1": 1.5, "b": 0.75, "method": "lucene"}
    assert built.path.name == f"en-us-{corpus.fingerprint}-{tokenizer_version()}"


def test_hits_drop_zero_scores_and_break_ties_by_corpus_order(tiny: Corpus, tmp_path: Path) -> None:
    index = load_or_build_index(tiny, tmp_path)
    assert index.search("unseen words only", 10) == []
    assert index.search("", 10) == []
    hits = index.search("fruit", 10)
    assert {h.doc.title for h in hits} == {"Apple", "Banana"}
    assert all(h.score > 0 for h in hits)
    twins = index.search("zebras", 10)
    assert [h.doc.title for h in twins] == ["Twin two", "Twin one"]  # corpus order, not by name
    assert twins[0].score == twins[1].score
    assert index.rank_of("zebras", "Twin_one") == 2 and index.rank_of("zebras", "Apple") is None


def test_settings_mismatch_triggers_rebuild(tiny: Corpus, tmp_path: Path) -> None:
    first = load_or_build_index(tiny, tmp_path)
    other = load_or_build_index(tiny, tmp_path, params=BM25Params(k1=1.2))
    assert first.built and other.built
    saved = json.loads((other.path / SETTINGS_FILE).read_text())
    assert saved["bm25"]["k1"] == 1.2
    assert not load_or_build_index(tiny, tmp_path, params=BM25Params(k1=1.2)).built
    (other.path / SETTINGS_FILE).write_text(json.dumps({**saved, "drop_stopwords": False}))
    assert load_or_build_index(tiny, tmp_path, params=BM25Params(k1=1.2)).built


def test_unreadable_index_is_rebuilt(tiny: Corpus, tmp_path: Path) -> None:
    index = load_or_build_index(tiny, tmp_path)
    for f in index.path.glob("*.npy"):
        f.write_bytes(b"garbage")
    again = load_or_build_index(tiny, tmp_path)
    assert again.built
    assert again.search("banana", 1)[0].doc.title == "Banana"


def test_chinese_query_finds_the_right_doc(chinese: Corpus, tmp_path: Path) -> None:
    index = load_or_build_index(chinese, tmp_path)
    assert index.search("长城在哪里？", 3)[0].doc.title == "长城"
    assert index.search("请问黄河有多长", 3)[0].doc.title == "黄河"
    assert index.search("介绍一下北京的皇家宫殿", 3)[0].doc.title == "故宫"
    assert index.search("什么", 3) == []  # only function words: no hit, no crash


def test_concurrent_builders_leave_one_complete_index(tiny: Corpus, tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def build() -> None:
        try:
            load_or_build_index(tiny, tmp_path)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert not load_or_build_index(tiny, tmp_path).built
    assert [p.name for p in index_dir(tiny, tmp_path).parent.iterdir()] == [index_dir(tiny, tmp_path).name]


def test_atomic_dir_replace_policy(tmp_path: Path) -> None:
    final = tmp_path / "d"
    with atomic_dir(final) as tmp:
        (tmp / "f").write_text("one")
    with atomic_dir(final, replace=False) as tmp:
        (tmp / "f").write_text("two")
    assert (final / "f").read_text() == "one"
    with atomic_dir(final) as tmp:
        (tmp / "f").write_text("three")
    assert (final / "f").read_text() == "three"
    with pytest.raises(RuntimeError), atomic_dir(final) as tmp:
        (tmp / "f").write_text("four")
        raise RuntimeError("builder failed")
    assert (final / "f").read_text() == "three"
    assert [p.name for p in tmp_path.iterdir()] == ["d"]  # no temp dirs left behind
