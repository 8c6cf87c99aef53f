"""Demo dataset: deterministic (blurred, fused) query pairs mined from the offline corpus.

Every instance names one intended article. ``fused_query`` is a request for it
with a disambiguating qualifier; ``blurred_query`` is the same request with the
qualifier removed. The set is rebuilt on demand from the installed corpus and
cached on disk (never committed); its gold is built once with fixed
components (extractive search + rule extractor), like the paper's static gold.

Where pairs come from (``meta["source"]``):

* ``qualified_title``: titles with a parenthesised qualifier, ``Mercury (planet)``;
  head = the base name, qualifier = the parenthesis.
* ``sibling_description``: an unqualified title whose base name also has a
  qualified sibling (``Casablanca`` vs ``Casablanca (film)``); qualifier = its
  short description ("largest city in Morocco").
* ``dated_title``: a title that is a year, century or era plus a head
  (``1755 Lisbon earthquake``, ``Medieval music``, ``Revolutions of 1848``).
* ``placed_title``: ``<head> of|in <place>`` (``History of China``) where the
  head is an article itself or shared by several such titles.
* ``creator_description``: a work whose description names its creator
  (``1932 novel by Aldous Huxley``); qualifier = the creator.
* ``work_description``: a work whose description starts with a year and a work
  type (``1968 film``); qualifier = that phrase.

Ambiguity kinds (``meta["ambiguity"]``); a parenthesised qualifier is classified
by the first rule that matches:

1. ``creator``: the article's description says "... by <qualifier's first word>"
   (``Leviathan (Hobbes book)``: "1651 book by Thomas Hobbes");
2. ``description``: the qualifier ends in a work or organisation type
   (film, novel, album, band, book, game, magazine ...: ``Psycho (1960 film)``);
3. ``time``: it contains a year, a year range, a century, a world war or an era
   word (ancient, medieval, prehistoric, antiquity);
4. ``region``: it is a place name (a Geography title, or a title described as a
   country, continent, city ...) or a place type (state, city, country ...);
5. ``creator``: it starts with a person's name or surname (People titles, and
   titles whose description carries a life span);
6. ``sense``: anything else (a field or a kind of thing: ``Crane (bird)``).

Other sources have a fixed kind (``sibling_description`` is ``region`` when its
description names a place, else ``sense``).

An instance is kept only if BM25 ranks the intended article first for its
fused query, so gold built from the top evidence is about the intended
article. Selection is deterministic: per kind, candidates are ordered by source
(parenthesised titles first), spread over distinct heads, genuinely ambiguous
ones first (the blurred query does not rank the intended article first), then
by a seeded hash; kinds are then taken round-robin, one article at most once.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import re
import time
from collections import Counter, defaultdict
from collections.abc import Coroutine, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cts.corpus import QUALIFIED_TITLE, Corpus, Doc, base_title, place_names
from cts.index import CorpusIndex, atomic_dir, tokenizer_version
from cts.text import content_tokens
from cts.types import Instance

if TYPE_CHECKING:
    from cts.data import Dataset
    from cts.services import Services

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
_FIELD_DESC = re.compile(
    r"\b(?:study|science|scientific|branch|field|discipline|art)\b", re.IGNORECASE
)
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
_BY = re.compile(
    r"\bby (?P<name>[A-Z][\w.'’-]*\.?(?: (?:(?:van|von|da|de|di|del|der|la|le) )?[A-Z][\w.'’-]*\.?)*)"
)
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
    return doc.topic == "People" or (
        doc.topic == "Uncategorized" and bool(_LIFESPAN.search(doc.description))
    )


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
    alternatives = "|".join(
        re.escape(p) for p in sorted(places, key=len, reverse=True) if len(p) > 2
    )
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
        yield Candidate(
            d.id, kind, d.title, q, f"{d.title}, the {q}", d.title, "sibling_description"
        )


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
        yield Candidate(
            d.id, "creator", d.title, name, f"{d.title} by {name}", d.title, "creator_description"
        )


def work_description_candidates(corpus: Corpus, lex: Lexicons) -> Iterator[Candidate]:
    """Works whose description starts with a year and a work type (``1968 film``)."""
    for d in corpus.docs:
        m = _WORK_DESC.match(d.description)
        if m and not QUALIFIED_TITLE.fullmatch(d.title):
            q = m.group("q")
            yield Candidate(
                d.id, "description", d.title, q, f"{d.title}, the {q}", d.title, "work_description"
            )


SOURCES = (
    qualified_title_candidates,
    sibling_description_candidates,
    dated_title_candidates,
    placed_title_candidates,
    creator_description_candidates,
    work_description_candidates,
)


def _digest(*parts: object) -> int:
    return int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16], 16)


def _well_formed(c: Candidate, fused: str, blurred: str) -> bool:
    """Head in both queries, qualifier verbatim in fused only, and adding information."""
    if c.head not in fused or c.head not in blurred or c.qualifier not in fused:
        return False
    if c.qualifier.lower() in blurred.lower():
        return False
    return bool(set(content_tokens(c.qualifier)) - set(content_tokens(c.head)))


@dataclass(frozen=True)
class _Checked:
    candidate: Candidate
    instance: Instance
    blurred_first: bool


def _check(c: Candidate, index: CorpusIndex, lex: Lexicons, seed: int) -> _Checked | None:
    """The candidate as an instance if well formed and BM25 ranks its article first."""
    stem = STEMS[_digest(seed, "stem", c.doc_id) % len(STEMS)]
    fused, blurred = stem.format(x=c.fused_x), stem.format(x=c.blurred_x)
    if not _well_formed(c, fused, blurred):
        return None
    top = index.search(fused, 1)
    if not top or top[0].doc.id != c.doc_id:
        return None
    blurred_rank = index.rank_of(blurred, c.doc_id, k=10)
    meta = {
        "language": "en",
        "ambiguity": c.kind,
        "intended_doc": c.doc_id,
        "head": c.head,
        "qualifier": c.qualifier,
        "source": c.source,
        "blurred_rank": blurred_rank,
        "place": find_place(fused, lex),
    }
    inst = Instance(id="", blurred_query=blurred, fused_query=fused, meta=meta)
    return _Checked(c, inst, blurred_rank == 1)


def _order_kind(items: list[_Checked], seed: int) -> list[_Checked]:
    """Source priority, then distinct heads first, ambiguous first, then seeded hash."""

    def key(it: _Checked) -> tuple[int, bool, int]:
        c = it.candidate
        return (SOURCE_PRIORITY.get(c.source, 1), it.blurred_first, _digest(seed, c.kind, c.doc_id))

    seen: Counter[str] = Counter()
    spread: list[tuple[tuple[int, int], _Checked]] = []
    for it in sorted(items, key=key):
        spread.append(((key(it)[0], seen[it.candidate.head]), it))
        seen[it.candidate.head] += 1
    # A stable sort keeps the key order among equal (priority, occurrence) pairs.
    return [it for _, it in sorted(spread, key=lambda pair: pair[0])]


def _round_robin(by_kind: Mapping[str, list[_Checked]], n: int) -> list[_Checked]:
    queues = {k: list(by_kind.get(k, [])) for k in KINDS}
    used: set[str] = set()
    out: list[_Checked] = []
    while len(out) < n and any(queues.values()):
        for kind in KINDS:
            queue = queues[kind]
            while queue and queue[0].candidate.doc_id in used:
                queue.pop(0)
            if queue and len(out) < n:
                item = queue.pop(0)
                used.add(item.candidate.doc_id)
                out.append(item)
    return out


def build_demo_instances(
    corpus: Corpus, index: CorpusIndex, n: int = 200, seed: int = 0
) -> list[Instance]:
    """Mine ``n`` (blurred, fused) pairs from the corpus, balanced across ambiguity kinds.

    Args:
        corpus: An English corpus (the rules are English).
        index: BM25 index of ``corpus``; a pair is kept only if its fused query
            ranks the intended article first.
        n: Number of instances wanted (fewer if the corpus runs out).
        seed: Selects request stems and the order within a kind.

    Returns:
        Instances ``demo-0001`` ... in round-robin kind order.
    """
    lex = build_lexicons(corpus)
    by_kind: dict[str, list[_Checked]] = defaultdict(list)
    for source in SOURCES:
        for c in source(corpus, lex):
            checked = _check(c, index, lex, seed)
            if checked is not None:
                by_kind[c.kind].append(checked)
    chosen = _round_robin({k: _order_kind(v, seed) for k, v in by_kind.items()}, n)
    return [
        Instance(
            id=f"demo-{i:04d}",
            blurred_query=it.instance.blurred_query,
            fused_query=it.instance.fused_query,
            meta=it.instance.meta,
        )
        for i, it in enumerate(chosen, start=1)
    ]


def kind_counts(instances: Iterable[Instance]) -> dict[str, int]:
    """Number of instances per ambiguity kind, in :data:`KINDS` order."""
    counts = Counter(i.meta.get("ambiguity") for i in instances)
    return {k: counts[k] for k in KINDS if counts[k]}


def demo_dir(services: Services, n: int, seed: int) -> Path:
    """Cache directory of the demo set for ``(n, seed)``, the installed corpus and the tokeniser.

    The tokeniser decides BM25 ranks, hence which instances qualify and their gold.
    """
    name = f"{DEMO_VERSION}-n{n}-s{seed}-{services.corpus.fingerprint}-{tokenizer_version()}"
    return Path(services.cache_dir) / "demo" / name


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, even when called inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _gold_provenance(services: Services, n: int, seed: int) -> dict[str, Any]:
    corpus = services.corpus
    return {
        "dataset": "demo",
        "demo_version": DEMO_VERSION,
        "n": n,
        "seed": seed,
        "corpus": f"{corpus.lang}-{corpus.fingerprint}",
        "backend": "extractive",
        "backend_params": {"top_k": 3, "max_chars": 1500},
        "extractor": "rules",
        "extractor_params": {"max_nuggets": 6, "max_docs": 1, "weights": [3, 2, 1]},
    }


def _build_demo(services: Services, n: int, seed: int, path: Path) -> None:
    """Build instances and their static gold, then install them at ``path`` atomically."""
    from cts.data import write_instances_jsonl
    from cts.extract import RuleExtractor
    from cts.gold import build_gold_archive
    from cts.search.extractive import ExtractiveSearch

    t0 = time.perf_counter()
    log.info("building demo dataset (n=%d, seed=%d) at %s", n, seed, path)
    instances = build_demo_instances(services.corpus, services.index, n=n, seed=seed)
    t1 = time.perf_counter()
    # Fixed gold components, not the job's configured ones: gold is static.
    search = ExtractiveSearch(services=services, top_k=3, max_chars=1500)
    extractor = RuleExtractor(services=services, max_nuggets=6, max_docs=1, weights=(3, 2, 1))
    provenance = _gold_provenance(services, n, seed)
    with atomic_dir(path, replace=False) as tmp:
        # The same archive code path as `experiment=gold`: gold.jsonl + every trace in gold_runs.jsonl.
        report = _run_sync(build_gold_archive(instances, search, extractor, tmp, provenance=provenance))
        for instance_id, reason in report.failures:
            log.warning("demo gold %s dropped: %s", instance_id, reason)
        failed = {instance_id for instance_id, _ in report.failures}
        kept = [i for i in instances if i.id not in failed]
        write_instances_jsonl(kept, tmp / "instances.jsonl")
    log.info(
        "built demo: %d instances %s (instances %.2fs, gold %.2fs)",
        len(kept),
        kind_counts(kept),
        t1 - t0,
        time.perf_counter() - t1,
    )


def load_demo(services: Services, n: int = 200, seed: int = 0, **_: Any) -> Dataset:
    """The demo dataset, built and cached on first use (``conf/dataset/demo.yaml``).

    Args:
        services: Job services (corpus, index, cache dir).
        n: Number of instances.
        seed: Generation seed.

    Returns:
        The instances and their validated static gold.

    Raises:
        ValueError: The corpus is not English, or an instance lacks gold.
    """
    from cts.data import Dataset, read_instances_jsonl
    from cts.gold import load_gold

    if not services.corpus.lang.startswith("en"):
        raise ValueError(f"the demo rules are English; corpus is {services.corpus.lang!r}")
    path = demo_dir(services, n, seed)
    if not (path / "gold.jsonl").is_file():
        _build_demo(services, n, seed, path)
    instances = tuple(read_instances_jsonl(path / "instances.jsonl"))
    gold = load_gold(path / "gold.jsonl")
    missing = [i.id for i in instances if i.id not in gold]
    if missing:
        raise ValueError(f"{path}: instances without gold: {missing[:5]}")
    return Dataset(name="demo", instances=instances, gold=gold)


def _default_cache_dir() -> Path:
    return Path(os.environ.get("CTS_CACHE_DIR") or Path.home() / ".cache" / "cts")


def main(argv: Sequence[str] | None = None) -> None:
    """``cts-demo``: build (or reuse) the cached demo set and print where it is."""
    from cts.services import Services

    parser = argparse.ArgumentParser(prog="cts-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="number of instances")
    parser.add_argument("--seed", type=int, default=0, help="generation seed")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=_default_cache_dir(),
        help="cache root (default: $CTS_CACHE_DIR or ~/.cache/cts)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    services = Services(cache_dir=args.cache_dir, settings={"corpus_lang": "en-us"})
    t0 = time.perf_counter()
    data = load_demo(services, n=args.n, seed=args.seed)
    print(f"demo set: {demo_dir(services, args.n, args.seed)}")
    print(f"instances: {len(data.instances)} ({time.perf_counter() - t0:.2f}s)")
    for kind, count in kind_counts(data.instances).items():
        print(f"  {kind:<12} {count}")


if __name__ == "__main__":
    main()
