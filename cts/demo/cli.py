"""``cts-demo`` / ``python -m cts.demo``: build (or reuse) the cached demo set."""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from cts.core.types import CacheDir
from cts.demo.loading import demo_dir, load_demo
from cts.demo.selection import kind_counts

log = logging.getLogger(__name__)
T = TypeVar("T")


def _default_cache_dir() -> Path:
    return Path(os.environ.get("CTS_CACHE_DIR") or Path.home() / ".cache" / "cts")


def main(argv: Sequence[str] | None = None) -> None:
    """``cts-demo``: build (or reuse) the cached demo set and print where it is."""
    from cts.compose.services import Services

    parser = argparse.ArgumentParser(
        prog="cts-demo", description="Build (or reuse) the cached demo set and print where it is."
    )
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
    data = load_demo(services.corpus, services.index, CacheDir(services.cache_dir), n=args.n, seed=args.seed)
    print(f"demo set: {demo_dir(services.corpus, services.cache_dir, args.n, args.seed)}")
    print(f"instances: {len(data.instances)} ({time.perf_counter() - t0:.2f}s)")
    for kind, count in kind_counts(data.instances).items():
        print(f"  {kind:<12} {count}")
