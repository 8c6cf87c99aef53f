"""BM25 index over a :class:`~cts.corpus.wiki.Corpus`, cached on disk.

Documents (title + description + text) and queries go through the same
CJK-aware tokeniser (:func:`cts.text.tokens.tokenize` with stopwords dropped); bm25s
only ever sees token lists. bm25s does not save tokeniser settings with an
index, so a ``settings.json`` beside it records them and a mismatch triggers a
rebuild. Index directories are written to a temporary sibling and renamed into
place, so concurrent builders never expose a half-written index.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

import cts.text.tokens
from cts._util.console import DETAIL
from cts._util.io import atomic_dir
from cts.corpus.wiki import Corpus, Doc
from cts.text.tokens import content_tokens

log = logging.getLogger(__name__)

TOKENIZER = "cts.text.tokenize"  # the name in existing index caches (cts.text re-exports it)
FIELDS = ("title", "description", "text")
SETTINGS_FILE = "settings.json"
DOC_IDS_FILE = "doc_ids.json"


def tokenizer_version() -> str:
    """Short hash of the tokeniser's code (its module's syntax tree).

    Any edit to :mod:`cts.text.tokens` that changes code (rules, stopword lists) changes it,
    so a stale index can never be reused after the tokeniser changed; reformatting or a
    comment does not.
    """
    tree = ast.parse(Path(cts.text.tokens.__file__).read_text(encoding="utf-8"))
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:8]


def doc_tokens(doc: Doc) -> list[str]:
    """Index tokens of one document: title, description and text."""
    return content_tokens("\n".join(getattr(doc, f) for f in FIELDS))


@dataclass(frozen=True)
class Hit:
    """One retrieved document and its BM25 score."""

    doc: Doc
    score: float


@dataclass(frozen=True)
class BM25Params:
    """bm25s scoring parameters (saved in the settings file)."""

    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"


class CorpusIndex:
    """A BM25 retriever aligned with a corpus (index position i is ``corpus.docs[i]``)."""

    def __init__(self, corpus: Corpus, retriever: bm25s.BM25, *, path: Path, built: bool) -> None:
        self.corpus = corpus
        self.path = path
        self.built = built
        """True when this object was built (not loaded) by :func:`load_or_build_index`."""
        self._bm25 = retriever
        self._vocab: Mapping[str, int] = retriever.vocab_dict

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (zeros when no term is known)."""
        ids = [self._vocab[t] for t in content_tokens(query) if t in self._vocab]
        if not ids:
            return np.zeros(len(self.corpus), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(ids), dtype=np.float32)

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """Top-``k`` documents for ``query``.

        Args:
            query: Free text in any script.
            k: Maximum number of hits.

        Returns:
            Hits by descending score; ties keep corpus order; zero scores dropped.
        """
        scores = self.scores(query)
        idx = np.flatnonzero(scores > 0)
        order = idx[np.lexsort((idx, -scores[idx]))][:k]
        return [Hit(doc=self.corpus.docs[i], score=float(scores[i])) for i in order]

    def rank_of(self, query: str, doc_id: str, k: int = 10) -> int | None:
        """1-based rank of ``doc_id`` among the top ``k`` hits, or None."""
        for rank, hit in enumerate(self.search(query, k), start=1):
            if hit.doc.id == doc_id:
                return rank
        return None


def index_settings(corpus: Corpus, params: BM25Params) -> dict[str, Any]:
    """Everything that must match for a saved index to be reused."""
    return {
        "tokenizer": TOKENIZER,
        "tokenizer_version": tokenizer_version(),
        "drop_stopwords": True,
        "fields": list(FIELDS),
        "bm25": {"k1": params.k1, "b": params.b, "method": params.method},
        "bm25s_version": bm25s.__version__,
        "lang": corpus.lang,
        "corpus_fingerprint": corpus.fingerprint,
        "n_docs": len(corpus),
    }


def index_dir(corpus: Corpus, cache_dir: Path) -> Path:
    """Where the index of ``corpus`` lives under ``cache_dir``."""
    name = f"{corpus.lang}-{corpus.fingerprint}-{tokenizer_version()}"
    return Path(cache_dir) / "index" / name


def build_index(corpus: Corpus, params: BM25Params = BM25Params()) -> bm25s.BM25:
    """Tokenise every document and build an in-memory BM25 retriever."""
    retriever = bm25s.BM25(k1=params.k1, b=params.b, method=params.method)
    tokens = [doc_tokens(d) for d in corpus.docs]
    retriever.index(tokens, show_progress=False)
    return retriever


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _load_saved(path: Path, corpus: Corpus, settings: Mapping[str, Any]) -> bm25s.BM25 | None:
    """The saved retriever at ``path`` if its settings and doc order match, else None."""
    if _read_json(path / SETTINGS_FILE) != settings:
        return None
    if _read_json(path / DOC_IDS_FILE) != [d.id for d in corpus.docs]:
        return None
    try:
        return bm25s.BM25.load(str(path), load_corpus=False, mmap=False)
    except (OSError, ValueError, KeyError) as exc:
        log.warning("unreadable index at %s (%s); rebuilding", path, exc)
        return None


def _save(retriever: bm25s.BM25, corpus: Corpus, settings: Mapping[str, Any], path: Path, *, stale: bool) -> None:
    # Replace only a stale index; a fresh one a concurrent builder installed is as good as ours.
    with atomic_dir(path, replace=stale) as tmp:
        retriever.save(str(tmp))
        (tmp / DOC_IDS_FILE).write_text(json.dumps([d.id for d in corpus.docs]), encoding="utf-8")
        # Written last: a directory with settings.json is complete.
        (tmp / SETTINGS_FILE).write_text(json.dumps(settings, indent=2), encoding="utf-8")


def load_or_build_index(corpus: Corpus, cache_dir: Path, *, params: BM25Params = BM25Params()) -> CorpusIndex:
    """Load the cached BM25 index of ``corpus``, building and saving it if needed.

    Args:
        corpus: Any corpus (the offline Wikipedia one or a synthetic one).
        cache_dir: Cache root; the index goes to ``index/<lang>-<fingerprint>-<tokenizer>/``.
        params: BM25 parameters; a saved index built with others is rebuilt.

    Returns:
        The index; ``built`` tells whether it was rebuilt in this call.
    """
    path = index_dir(corpus, cache_dir)
    settings = index_settings(corpus, params)
    t0 = time.perf_counter()
    retriever = _load_saved(path, corpus, settings)
    if retriever is not None:
        log.info("loaded BM25 index %s in %.2fs", path, time.perf_counter() - t0, extra=DETAIL)
        return CorpusIndex(corpus, retriever, path=path, built=False)
    stale = path.exists()
    log.info("building BM25 index of %d docs at %s", len(corpus), path)
    retriever = build_index(corpus, params)
    _save(retriever, corpus, settings, path, stale=stale)
    log.info("built BM25 index in %.2fs", time.perf_counter() - t0)
    return CorpusIndex(corpus, retriever, path=path, built=True)
