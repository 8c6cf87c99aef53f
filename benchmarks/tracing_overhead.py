"""Tracing overhead: the offline 200-instance job with per-instance MLflow traces on vs off.

    PYTHONPATH=. python benchmarks/tracing_overhead.py [--reps 2] [--k 2]

Each run is a fresh ``run.py experiment=offline`` process with its own MLflow
store (created beforehand, so schema migration is not timed) and the shared
dataset/index cache. Wall time of the whole process is reported, alternating
off/on so that machine load hits both alike; the ratio is on/off of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one_run(root: Path, traces: bool, k: int) -> float:
    """Seconds for one offline job (process start to exit)."""
    uri = f"sqlite:///{root / 'mlflow.db'}"
    from cts import tracking

    tracking.prepare_store(uri)
    start = time.perf_counter()
    subprocess.run([sys.executable, str(REPO / "run.py"), "experiment=offline", f"k={k}",
                    f"tracking.instance_traces={str(traces).lower()}", f"tracking.uri={uri}",
                    f"hydra.run.dir={root / 'job'}"], check=True, capture_output=True, cwd=root)
    return time.perf_counter() - start


def main() -> None:
    """Alternate off/on runs and print the medians and their ratio."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--k", type=int, default=2)
    args = parser.parse_args()
    times: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="cts-trace-bench-") as tmp:
        for rep in range(args.reps):
            for traces in (False, True):
                root = Path(tmp) / f"{rep}-{traces}"
                root.mkdir()
                times[traces].append(one_run(root, traces, args.k))
                print(f"rep {rep} traces={traces}: {times[traces][-1]:.1f} s", flush=True)
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"median off {off:.1f} s, on {on:.1f} s, ratio on/off {on / off:.2f}")


if __name__ == "__main__":
    main()
