"""Tracing overhead: the offline 200-instance job with per-instance MLflow traces on vs off.

    PYTHONPATH=. python benchmarks/tracing_overhead.py [--reps 3] [--k 2] [--mlflow-defaults]

Each run is a fresh ``run.py experiment=offline`` process with its own MLflow
store (created beforehand, so schema migration is not timed) and the shared
dataset/index cache. Wall time of the whole process is reported (the job waits
for its traces to reach the store before it exits), alternating the arms so that
machine load hits them alike; the ratio is on/off of the medians, and the cost
per instance is their difference over the instances. ``--mlflow-defaults`` adds
an arm with traces on and MLflow's own asynchronous-logging settings (batches of 5
spans, 10 writer threads) instead of the ones cts sets (cts.tracking._store).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import reference_cpu_s  # benchmarks/machine.py, beside this script

REPO = Path(__file__).resolve().parents[1]
N_INSTANCES = 200
MLFLOW_DEFAULTS = {
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE": "5",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_INTERVAL_MILLIS": "5000",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_WORKERS": "10",
}
ARMS = {"off": (False, {}), "on": (True, {}), "on, MLflow's settings": (True, MLFLOW_DEFAULTS)}


def one_run(root: Path, traces: bool, k: int, env: dict[str, str]) -> float:
    """Seconds for one offline job (process start to exit)."""
    uri = f"sqlite:///{root / 'mlflow.db'}"
    from cts import tracking

    tracking.prepare_store(uri)
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(REPO / "run.py"),
            "experiment=offline",
            f"k={k}",
            f"tracking.instance_traces={str(traces).lower()}",
            f"tracking.uri={uri}",
            f"hydra.run.dir={root / 'job'}",
        ],
        check=True,
        capture_output=True,
        cwd=root,
        env={**os.environ, **env},
    )
    return time.perf_counter() - start


def main() -> None:
    """Alternate the arms and print their medians, the ratio and the cost per instance."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--mlflow-defaults", action="store_true", help="also time MLflow's own async settings")
    args = parser.parse_args()
    arms = [a for a in ARMS if args.mlflow_defaults or a != "on, MLflow's settings"]
    reference = reference_cpu_s()
    times: dict[str, list[float]] = {a: [] for a in arms}
    with tempfile.TemporaryDirectory(prefix="cts-trace-bench-") as tmp:
        for rep in range(args.reps):
            for arm in arms:
                root = Path(tmp) / f"{rep}-{arms.index(arm)}"
                root.mkdir()
                traces, env = ARMS[arm]
                times[arm].append(one_run(root, traces, args.k, env))
                print(f"rep {rep} traces {arm}: {times[arm][-1]:.2f} s", flush=True)
    off = statistics.median(times["off"])
    for arm in arms[1:]:
        on = statistics.median(times[arm])
        print(
            f"traces {arm}: median {on:.2f} s against {off:.2f} s off, ratio {on / off:.2f}, "
            f"{(on - off) / N_INSTANCES * 1000:.0f} ms per instance"
        )
    print(f"machine reference (benchmarks/machine.py): {reference:.3f} s CPU before, {reference_cpu_s():.3f} s after")


if __name__ == "__main__":
    main()
