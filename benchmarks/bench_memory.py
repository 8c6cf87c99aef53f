"""Memory benchmark: max RSS of the offline job as the dataset grows.

The offline corpus yields a few hundred demo instances at most, so larger sets
are synthesised: instance ``j`` is demo instance ``j mod n_demo`` under a new id
(``mem-000001`` ...), with that instance's gold under the new id. The files go
to a temporary directory (corpus text never leaves the cache). Each size runs
``run.py experiment=offline`` in its own process, and the kernel's max RSS of
that process is reported::

    python benchmarks/bench_memory.py --sizes 200 2000 20000

This is a benchmark, not a test: the figures depend on the machine. It exits 1
when max RSS at the largest size exceeds ``--max-ratio`` times that at the smallest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cts._util.io import write_jsonl
from cts.core.types import CacheDir
from cts.data.jsonl import Dataset, write_instances_jsonl
from cts.demo import load_demo
from cts.gold import gold_to_dict

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class MemoryResult:
    """Figures of one job of the benchmark."""

    n: int
    max_rss_mb: float
    wall_s: float
    exit_code: int


def synthesise(demo: Dataset, n: int, out: Path) -> tuple[Path, Path]:
    """Write ``n`` instances (demo instances reused under new ids) and their gold.

    Args:
        demo: The demo set the instances are taken from.
        n: Number of instances wanted.
        out: Directory for ``instances.jsonl`` and ``gold.jsonl``.

    Returns:
        The instance and gold file paths.
    """
    from dataclasses import replace

    base = list(demo.instances)
    instances = [replace(base[j % len(base)], id=f"mem-{j + 1:06d}") for j in range(n)]
    out.mkdir(parents=True, exist_ok=True)
    inst_path, gold_path = out / "instances.jsonl", out / "gold.jsonl"
    write_instances_jsonl(instances, inst_path)
    rows = ({**gold_to_dict(demo.gold[base[j % len(base)].id]), "instance_id": i.id} for j, i in enumerate(instances))
    write_jsonl(rows, gold_path)
    return inst_path, gold_path


def measure_job_memory(n: int, inst: Path, gold: Path, work: Path, extra: Sequence[str] = ()) -> MemoryResult:
    """Run the offline job over ``inst`` in a child process and read its max RSS."""
    cmd = [
        sys.executable,
        str(REPO / "run.py"),
        "experiment=offline",
        "dataset=jsonl",
        f"dataset.path={inst}",
        f"dataset.gold_path={gold}",
        "dataset.name=bench_memory",
        f"tracking.uri=sqlite:///{work / 'mlflow.db'}",
        f"hydra.run.dir={work / f'job-{n}'}",
        *extra,
    ]
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "TQDM_DISABLE": "1"}
    start = time.perf_counter()
    log = (work / f"job-{n}.log").open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    log.close()
    # ru_maxrss is in KiB on Linux.
    return MemoryResult(n, usage.ru_maxrss / 1024, time.perf_counter() - start, proc.returncode)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print one line per size (and a JSON summary)."""
    from cts.compose.services import Services
    from cts.demo.cli import _default_cache_dir

    parser = argparse.ArgumentParser(prog="python benchmarks/bench_memory.py", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 2000, 20000])
    parser.add_argument("--cache-dir", type=Path, default=_default_cache_dir())
    parser.add_argument("--max-ratio", type=float, default=2.0, help="allowed RSS(largest) / RSS(smallest)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (printed)")
    args = parser.parse_args(argv)
    services = Services(cache_dir=args.cache_dir, settings={"corpus_lang": "en-us"})
    demo = load_demo(services.corpus, services.index, CacheDir(services.cache_dir))
    work = Path(tempfile.mkdtemp(prefix="cts-bench-memory-"))
    results = []
    for n in args.sizes:
        inst, gold = synthesise(demo, n, work / f"data-{n}")
        result = measure_job_memory(n, inst, gold, work, [f"paths.cache_dir={args.cache_dir}"])
        results.append(result)
        print(
            f"n={n:>7,}  max_rss={result.max_rss_mb:8.1f} MB  wall={result.wall_s:7.1f} s  exit={result.exit_code}",
            flush=True,
        )
    ratio = results[-1].max_rss_mb / results[0].max_rss_mb
    print(json.dumps({"results": [r.__dict__ for r in results], "ratio": round(ratio, 3)}))
    if args.keep:
        print(f"work dir kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    failed = any(r.exit_code for r in results) or ratio > args.max_ratio
    print(f"RSS ratio {results[-1].n}/{results[0].n} = {ratio:.2f} (limit {args.max_ratio})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
