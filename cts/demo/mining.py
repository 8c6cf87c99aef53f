"""Mining (head, qualifier) candidates from the offline corpus (see :mod:`cts.demo`)."""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from cts.corpus.wiki import QUALIFIED_TITLE, Corpus, Doc, base_title, place_names

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)
T = TypeVar("T")

DEMO_VERSION = "v2"
"""Bump when the generation rules change: it names the cache directory."""
KINDS: tuple[str, ...] = ("sense", "time", "region", "creator", "description")
STEMS: tuple[str, ...] = (
    "Tell me about {x}.",
    "What is known about {x}?",
    "Give me an overview of {x}.",
    "Please explain {x}.",
    "Describe {x}.",
)
"""Request stems; every word is a stopword, so the stem never moves BM25 rankings."""
SOURCE_PRIORITY = {"qualified_title": 0, "sibling_description": 0}

_TIME = re.compile(
    r"\b\d{3,4}\s*[–-]\s*(?:\d{2,4}|present)\b|\b\d{4}\b|\b\d{1,2}(?:st|nd|rd|th)[- ]century\b"
    r"|\bWorld War I{1,2}\b|\b(?:antiquity|ancient|medieval|prehistoric)\b",
    re.IGNORECASE,
)
_WORKS = frozenset(
    "film novel novella album band musical book magazine journal song single painting statue "  # noqa: SIM905
    "sculpture opera ballet poem play game character company series symphony".split()
)
_PLACE_TYPES = frozenset({"state", "city", "country", "continent", "island", "province"})
_PLACE_TYPES_MULTI = ("autonomous community",)
_LIFESPAN = re.compile(r"\(.*\d.*\)|\bborn \d")
_FIELD_DESC = re.compile(r"\b(?:study|science|scientific|branch|field|discipline|art)\b", re.IGNORECASE)
_FIELD_SUFFIX = ("ics", "logy", "nomy", "istry", "metry", "graphy", "sophy")
_FIELDS = frozenset(
    "architecture law arts medicine cooking tennis nutrition finance computing metalworking "  # noqa: SIM905
    "theatre music textiles aeronautics mythology taxonomy".split()
) | {"cue sports", "water navigation", "water supply", "fluid conveyance"}
_ADJECTIVE = re.compile(r"^[a-z]+(?:al|ory)$")
_DATED_PREFIX = re.compile(
    r"(?P<q>(?:1[0-9]|20)\d{2}|\d{1,2}(?:st|nd|rd|th)-century|Ancient|Medieval|Prehistoric) (?P<head>.+)"
)
_DATED_SUFFIX = re.compile(r"(?P<head>.+) of (?P<q>(?:1[0-9]|20)\d{2})")
_PLACED = re.compile(r"(?P<head>[A-Z].+?) (?:of|in) (?P<place>.+)")
_BY = re.compile(r"\bby (?P<name>[A-Z][\w.'’-]*\.?(?: (?:(?:van|von|da|de|di|del|der|la|le) )?[A-Z][\w.'’-]*\.?)*)")
_WORK_DESC = re.compile(
    r"^(?P<q>(?:1[0-9]|20)\d{2}(?:[–-]\d{2,4})? (?:[\w'-]+ ){0,2}?"
    r"(?:film|novel|novella|album|opera|ballet|painting|play|poem|book|single|musical|song))\b"
)


@dataclass(frozen=True)
class Lexicons:
    """Corpus-derived name lists the rules look words up in."""

    places: frozenset[str]
    """Place names: Geography titles and titles described as a country, city ..."""
    persons: frozenset[str]
    """Person names and surnames: People titles and titles with a life span."""
    bases: Mapping[str, tuple[str, ...]]
    """Base name (title without its parenthesised qualifier) -> titles sharing it."""
    place_regex: re.Pattern[str]


@dataclass(frozen=True)
class Candidate:
    """A possible instance, before the BM25 check and selection."""

    doc_id: str
    kind: str
    head: str
    qualifier: str
    fused_x: str
    """The requested thing with its qualifier, e.g. ``Mercury, the planet``."""
    blurred_x: str
    """The requested thing without it, e.g. ``Mercury``."""
    source: str


def _is_person(doc: Doc) -> bool:
    if QUALIFIED_TITLE.fullmatch(doc.title) or " of " in doc.title:
        return False
    return doc.topic == "People" or (doc.topic == "Uncategorized" and bool(_LIFESPAN.search(doc.description)))


def _person_names(docs: Iterable[Doc]) -> frozenset[str]:
    names: set[str] = set()
    for d in docs:
        if _is_person(d):
            names.add(d.title)
            last = d.title.split()[-1]
            if not re.fullmatch(r"[IVXLC]+\.?|Jr\.?|Sr\.?", last):
                names.add(last)
    return frozenset(names)


def build_lexicons(corpus: Corpus) -> Lexicons:
    """Place and person names and base-name groups of ``corpus``."""
    places = place_names(corpus)
    bases: dict[str, list[str]] = defaultdict(list)
    for d in corpus.docs:
        bases[base_title(d.title)].append(d.title)
    alternatives = "|".join(re.escape(p) for p in sorted(places, key=len, reverse=True) if len(p) > 2)
    return Lexicons(
        places=places,
        persons=_person_names(corpus.docs),
        bases={b: tuple(ts) for b, ts in bases.items()},
        place_regex=re.compile(rf"(?<![\w-])(?:{alternatives})(?![\w-])"),
    )


def find_place(text: str, lex: Lexicons) -> str | None:
    """The first place name of the lexicon mentioned in ``text``, or None."""
    m = lex.place_regex.search(text)
    return m.group(0) if m else None


def _is_region(q: str, lex: Lexicons) -> bool:
    return q in lex.places or q in _PLACE_TYPES or q in _PLACE_TYPES_MULTI


def classify_qualifier(q: str, doc: Doc, lex: Lexicons) -> str:
    """Ambiguity kind of a parenthesised qualifier (rules in the module docstring)."""
    first = q.split()[0]
    named = first[:1].isupper()
    if named and re.search(rf"\bby\b[^,;]*\b{re.escape(first)}\b", doc.description):
        return "creator"
    if q.split()[-1] in _WORKS:
        return "description"
    if _TIME.search(q):
        return "time"
    if _is_region(q, lex):
        return "region"
    if named and (q in lex.persons or first in lex.persons):
        return "creator"
    return "sense"


def _is_field(q: str, corpus: Corpus) -> bool:
    if q in _FIELDS or q.endswith(_FIELD_SUFFIX):
        return True
    doc = corpus.by_title(q[:1].upper() + q[1:])
    return doc is not None and bool(_FIELD_DESC.search(doc.description))


def _is_adjective(q: str, corpus: Corpus) -> bool:
    # "electrical" is an adjective; "animal" also ends in -al but is an article title.
    return bool(_ADJECTIVE.fullmatch(q)) and corpus.by_title(q.capitalize()) is None


def qualified_phrase(kind: str, head: str, q: str, corpus: Corpus) -> str:
    """Natural phrase naming ``head`` with qualifier ``q`` (kept verbatim)."""
    if kind == "time":
        if "World War" in q:
            return f"{head} during {q}"
        return f"{head} in {q}" if re.search(r"\d|antiquity", q) else f"{head}, the {q}"
    if kind == "region":
        return f"{head} in {q}" if q[:1].isupper() else f"{head}, the {q}"
    if kind == "creator":
        bare_name = all(w[:1].isupper() for w in q.split())
        return f"{head} by {q}" if bare_name else f"{head}, the {q}"
    if kind == "sense" and _is_adjective(q, corpus):
        return f"{head} in the {q} sense"
    if kind == "sense" and (_is_field(q, corpus) or re.fullmatch(r"[A-Z]\w+", q)):
        return f"{head} in {q}"  # a field, or a proper name ("Joseph in Genesis")
    return f"{head}, the {q}"


def _lower_first(text: str) -> str:
    """Sentence-case a description (keep acronyms such as ``US state``)."""
    return text if text[1:2].isupper() else text[:1].lower() + text[1:]


def qualified_title_candidates(corpus: Corpus, lex: Lexicons) -> Iterator[Candidate]:
    """Candidates from titles with a parenthesised qualifier."""
    for d in corpus.docs:
        m = QUALIFIED_TITLE.fullmatch(d.title)
        if not m:
            continue
        head, q = m.group("head"), m.group("q")
        kind = classify_qualifier(q, d, lex)
        x = qualified_phrase(kind, head, q, corpus)
        yield Candidate(d.id, kind, head, q, x, head, "qualified_title")


def sibling_description_candidates(corpus: Corpus, lex: Lexicons) -> Iterator[Candidate]:
    """Unqualified titles whose base name has a qualified sibling, told apart by description."""
    for d in corpus.docs:
        if len(lex.bases.get(d.title, ())) < 2 or not d.description or "(" in d.description:
            continue
        if len(d.description.split()) > 8 or d.title.lower() in d.description.lower():
            continue
        q = _lower_first(d.description)
        kind = "region" if find_place(q, lex) else "sense"
        yield Candidate(d.id, kind, d.title, q, f"{d.title}, the {q}", d.title, "sibling_description")


def dated_title_candidates(corpus: Corpus, lex: Lexicons) -> Iterator[Candidate]:
    """Titles made of a year, century or era and a head that is an article or specific."""
    for d in corpus.docs:
        if QUALIFIED_TITLE.fullmatch(d.title):
            continue
        m = _DATED_PREFIX.fullmatch(d.title) or _DATED_SUFFIX.fullmatch(d.title)
        if not m:
            continue
        head, q = m.group("head"), m.group("q")
        if corpus.by_title(head[:1].upper() + head[1:]) is None and len(head.split()) < 2:
            continue  # a lone generic word ("period") is no query
        yield Candidate(d.id, "time", head, q, d.title, head, "dated_title")


def placed_title_candidates(corpus: Corpus, lex: Lexicons) -> Iterator[Candidate]:
    """``<head> of|in <place>`` titles whose head is an article or shared by several places."""
    matches = [(d, _PLACED.fullmatch(d.title)) for d in corpus.docs if d.topic != "People"]
    placed = [(d, m) for d, m in matches if m and m.group("place") in lex.places]
    shared = Counter(m.group("head") for _, m in placed)
    for d, m in placed:
        head, place = m.group("head"), m.group("place")
        if shared[head] < 2 and corpus.by_title(head) is None:
            continue
        yield Candidate(d.id, "region", head, place, d.title, head, "placed_title")


def creator_description_candidates(corpus: Corpus, lex: Lexicons) -> Iterator[Candidate]:
    """Works whose description names a known person as their creator."""
    for d in corpus.docs:
        if QUALIFIED_TITLE.fullmatch(d.title) or d.topic == "People":
            continue
        m = _BY.search(d.description)
        if not m:
            continue
        name = m.group("name").rstrip(".")
        if name in d.title or not (name in lex.persons or name.split()[-1] in lex.persons):
            continue
        yield Candidate(d.id, "creator", d.title, name, f"{d.title} by {name}", d.title, "creator_description")


def work_description_candidates(corpus: Corpus, lex: Lexicons) -> Iterator[Candidate]:
    """Works whose description starts with a year and a work type (``1968 film``)."""
    for d in corpus.docs:
        m = _WORK_DESC.match(d.description)
        if m and not QUALIFIED_TITLE.fullmatch(d.title):
            q = m.group("q")
            yield Candidate(d.id, "description", d.title, q, f"{d.title}, the {q}", d.title, "work_description")


SOURCES = (
    qualified_title_candidates,
    sibling_description_candidates,
    dated_title_candidates,
    placed_title_candidates,
    creator_description_candidates,
    work_description_candidates,
)
