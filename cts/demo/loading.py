"""Loading the demo set: build once (instances + static gold) into the cache, then read it."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cts._util.io import atomic_dir
from cts._util.loops import run_sync
from cts.corpus.index import tokenizer_version

if TYPE_CHECKING:
    from cts.core.types import CacheDir
    from cts.corpus.index import CorpusIndex
    from cts.corpus.wiki import Corpus
    from cts.data.jsonl import Dataset


from cts.demo.mining import DEMO_VERSION
from cts.demo.selection import build_demo_instances, kind_counts

log = logging.getLogger(__name__)

GOLD_SEARCH: dict[str, Any] = {"top_k": 3, "max_chars": 1500}
"""The fixed gold search backend of the demo set (gold is static: not the job's backend)."""
GOLD_EXTRACTOR: dict[str, Any] = {"max_nuggets": 6, "max_docs": 1, "weights": (3, 2, 1)}
"""The fixed gold nugget extractor of the demo set."""


def demo_dir(corpus: Corpus, cache_dir: Path, n: int, seed: int) -> Path:
    """Cache directory of the demo set for ``(n, seed)``, the installed corpus and the tokeniser.

    The tokeniser decides BM25 ranks, hence which instances qualify and their gold.
    """
    name = f"{DEMO_VERSION}-n{n}-s{seed}-{corpus.fingerprint}-{tokenizer_version()}"
    return Path(cache_dir) / "demo" / name


def _gold_provenance(corpus: Corpus, n: int, seed: int) -> dict[str, Any]:
    return {
        "dataset": "demo",
        "demo_version": DEMO_VERSION,
        "n": n,
        "seed": seed,
        "corpus": f"{corpus.lang}-{corpus.fingerprint}",
        "backend": "extractive",
        "backend_params": dict(GOLD_SEARCH),
        "extractor": "rules",
        "extractor_params": {**GOLD_EXTRACTOR, "weights": list(GOLD_EXTRACTOR["weights"])},
    }


def _build_demo(corpus: Corpus, index: CorpusIndex, n: int, seed: int, path: Path) -> None:
    """Build instances and their static gold, then install them at ``path`` atomically."""
    from cts.data.jsonl import write_instances_jsonl
    from cts.gold import GoldArchive, build_gold_archive
    from cts.roles.nuggets import RuleExtractor
    from cts.search.extractive import ExtractiveSearch

    t0 = time.perf_counter()
    log.info("building demo dataset (n=%d, seed=%d) at %s", n, seed, path)
    instances = build_demo_instances(corpus, index, n=n, seed=seed)
    t1 = time.perf_counter()
    # Fixed gold components, not the job's configured ones: gold is static.
    search = ExtractiveSearch(index, **GOLD_SEARCH)
    extractor = RuleExtractor(**GOLD_EXTRACTOR)
    provenance = _gold_provenance(corpus, n, seed)
    with atomic_dir(path, replace=False) as tmp:
        # The same archive code path as `experiment=build_gold`: gold.jsonl + every trace in gold_runs.jsonl.
        report = run_sync(build_gold_archive(instances, search, extractor, GoldArchive(tmp, provenance)))
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


def load_demo(
    corpus: Corpus,
    index: CorpusIndex,
    cache_dir: CacheDir,
    n: int = 200,
    seed: int = 0,
    cluster_field: str | None = None,
) -> Dataset:
    """The demo dataset, built and cached on first use (``conf/dataset/demo.yaml``).

    Args:
        corpus: The offline corpus the instances are mined from.
        index: Its BM25 index (used only to build the set, on a cache miss).
        cache_dir: Cache root; the set lives under ``<cache_dir>/demo/``.
        n: Number of instances.
        seed: Generation seed.
        cluster_field: The meta key of each instance's cluster (:mod:`cts.data.clusters`); None = none.

    Returns:
        The instances and their validated static gold.

    Raises:
        ValueError: The corpus is not English, or an instance lacks gold (or a cluster: ``DatasetError``).
    """
    from cts.data.jsonl import Dataset, read_instances_jsonl, with_clusters
    from cts.gold import load_gold

    if not corpus.lang.startswith("en"):
        raise ValueError(f"the demo rules are English; corpus is {corpus.lang!r}")
    path = demo_dir(corpus, cache_dir, n, seed)
    if not (path / "gold.jsonl").is_file():
        _build_demo(corpus, index, n, seed, path)
    instances = tuple(read_instances_jsonl(path / "instances.jsonl"))
    gold = load_gold(path / "gold.jsonl")
    missing = [i.id for i in instances if i.id not in gold]
    if missing:
        raise ValueError(f"{path}: instances without gold: {missing[:5]}")
    return with_clusters(Dataset(name="demo", instances=instances, gold=gold), cluster_field)
