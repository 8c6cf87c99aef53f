"""Selecting demo instances: BM25 checks, per-kind ordering, round-robin over kinds."""

from __future__ import annotations

import hashlib
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from cts.core.types import Instance
from cts.corpus.index import CorpusIndex
from cts.corpus.wiki import Corpus
from cts.text.tokens import content_tokens

if TYPE_CHECKING:
    pass


from cts.demo.mining import (
    KINDS,
    SOURCE_PRIORITY,
    SOURCES,
    STEMS,
    Candidate,
    Lexicons,
    build_lexicons,
    find_place,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


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


def build_demo_instances(corpus: Corpus, index: CorpusIndex, n: int = 200, seed: int = 0) -> list[Instance]:
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
