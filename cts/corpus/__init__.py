"""The offline Wikipedia corpus (``wiki``) and its BM25 index (``index``, imported on use: bm25s is heavy)."""

from cts.corpus.wiki import (
    PACKAGE,
    PIP_NAME,
    QUALIFIED_TITLE,
    Corpus,
    Doc,
    base_title,
    data_dir,
    doc_id,
    load_corpus,
    place_names,
)

__all__ = [
    "PACKAGE",
    "PIP_NAME",
    "QUALIFIED_TITLE",
    "Corpus",
    "Doc",
    "base_title",
    "data_dir",
    "doc_id",
    "load_corpus",
    "place_names",
]
