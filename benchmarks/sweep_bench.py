"""Sweep benchmark: the card's multirun against the local server, per Hydra launcher.

Runs ``python run.py -m clarifier=gpt,ernie,claude k=1,2,3 limit=N`` (every role,
WebDancer with search and visit turns over the offline corpus) with every model
routed to ``ScriptedServer`` of ``tests/llm_fakes.py`` started here with a per-call
latency ``L`` and a hard cap ``C`` (429 above C calls in flight), once per
launcher, each with fresh LLM and tool caches. For each it prints the wall time
of the command and of its request phase (first request to last reply) against
the ideal ``max(critical path of one instance, distinct requests x L / C)``,
the requests the server served against the distinct ones, and the 429 count::

    python benchmarks/sweep_bench.py --n 50 --latency 0.5 --cap 32 --launcher basic,joblib,cts [--repeat 3]

The critical path is measured first: one instance of the longest job (k=3) alone,
with no cap. Each sweep writes to an MLflow store that already exists (a copy of
an empty one made once), as a user's ``outputs/mlflow.db`` does after the first
run: creating a SQLite store runs MLflow's migrations (4-8 s here), once per
store, not per sweep; ``--fresh-store`` counts it. Per-instance traces are off
(these are the launcher's figures); ``--extra tracking.instance_traces=true`` adds
them. This is a benchmark to read, not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from tests.llm_fakes import ScriptedServer, sweep_reply  # noqa: E402  (tests/ holds the fake server)

CARD = ("clarifier=gpt,ernie,claude", "k=1,2,3")
LAUNCHERS = {
    "basic": ("hydra/launcher=basic",),
    "joblib": ("hydra/launcher=joblib",),
    "cts": ("hydra/launcher=cts", "hydra.launcher.progress=false"),
}


@dataclass(frozen=True)
class SweepFigures:
    """What one launcher's sweep did against the server."""

    launcher: str
    wall_s: float
    """The whole command, Python start-up and MLflow included."""
    request_s: float
    """First request to last reply."""
    received: int
    """Requests that reached the server, 429s included."""
    served: int
    distinct: int
    rejected: int
    peak_in_flight: int
    exit_code: int
    timeline: tuple[float, ...] = ()
    """Mean calls in flight at the server per 2-s step of the request phase."""
    lead_s: float = 0.0
    """Command start to first request (start-up: imports, composition, set-up)."""
    tail_s: float = 0.0
    """Last reply to the command's exit (logging, MLflow, shut-down)."""


def _digest(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _fresh_cache(template: Path, into: Path) -> Path:
    """A cache dir with the BM25 index and the demo set, but no LLM or tool cache."""
    into.mkdir(parents=True)
    for name in ("index", "demo"):
        if (template / name).exists():
            shutil.copytree(template / name, into / name)
    return into


def run_sweep(
    server: ScriptedServer, launcher: tuple[str, ...], overrides: tuple[str, ...], work: Path, template: Path
) -> tuple[float, float, int, list[Any]]:
    """Run one sweep command; return wall time, request span, exit code and the served bodies.

    Also sets ``_LAST_TIMELINE`` and ``_LAST_EDGES`` (lead and tail seconds).
    """
    if not any(o.startswith("tracking.instance_traces=") for o in overrides):
        overrides = (*overrides, "tracking.instance_traces=false")  # the launcher's figures, without trace writing
    server.reset()
    server.handler = sweep_reply
    server.rejected = server.served = server.peak_in_flight = 0
    cache = _fresh_cache(template, work / "cache")
    if _STORE and _STORE.exists():
        shutil.copy(_STORE, work / "mlflow.db")
    args = [
        sys.executable,
        str(REPO / "run.py"),
        *overrides,
        *launcher,
        f"services.llm.api_base={server.base_url}",
        f"paths.cache_dir={cache}",
        f"tracking.uri=sqlite:///{work}/mlflow.db",
        "sweep_report=false",
        f"hydra.sweep.dir={work}/sweep",
        f"hydra.run.dir={work}/run",
    ]
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "PYTHONPATH": str(REPO)}
    start = time.monotonic()
    with _Sampler(server) as sampler:
        proc = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True)
    end = time.monotonic()
    wall = end - start
    _LAST_TIMELINE[:] = sampler.timeline()
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
    times = [r.time for r in server.requests]
    span = (max(times) - min(times) + server.latency_s) if times else 0.0
    _LAST_EDGES[:] = [min(times) - start, end - max(times) - server.latency_s] if times else [0.0, 0.0]
    return wall, span, proc.returncode, [r.body for r in server.requests]


_LAST_TIMELINE: list[float] = []
_LAST_EDGES: list[float] = [0.0, 0.0]
_STORE: Path | None = None
"""An empty, migrated MLflow store copied into each sweep's dir (None: each sweep creates its own)."""


def empty_store(work: Path) -> Path:
    """Create an empty MLflow SQLite store once (its migrations are not part of any sweep)."""
    sys.path.insert(0, str(REPO))
    from cts.tracking import prepare_store

    work.mkdir(parents=True, exist_ok=True)
    prepare_store(f"sqlite:///{work / 'mlflow.db'}")
    return work / "mlflow.db"


class _Sampler:
    """Samples the server's calls in flight every 50 ms while a sweep runs."""

    def __init__(self, server: ScriptedServer) -> None:
        self.server = server
        self.samples: list[tuple[float, int]] = []  # (time, calls in flight)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append((time.monotonic(), self.server.in_flight))

    def timeline(self, step: float = 2.0) -> list[float]:
        """Mean in flight per ``step`` seconds, from the first busy sample to the last."""
        busy = [i for i, (_, n) in enumerate(self.samples) if n > 0]
        if not busy:
            return []
        kept = self.samples[busy[0] : busy[-1] + 1]
        t0 = kept[0][0]
        out: list[float] = []  # the means so far
        bucket: list[int] = []  # the samples of the current step
        for t, n in kept:
            if t - t0 >= step * (len(out) + 1):
                out.append(sum(bucket) / max(1, len(bucket)))
                bucket = []
            bucket.append(n)
        return out + ([sum(bucket) / len(bucket)] if bucket else [])


def critical_path(server: ScriptedServer, work: Path, template: Path) -> float:
    """Request span of one instance of the k=3 job alone, no cap: the sweep cannot beat it."""
    cap, server.max_in_flight = server.max_in_flight, None
    try:
        _, span, code, _ = run_sweep(server, (), ("clarifier=gpt", "k=3", "limit=1"), work, template)
    finally:
        server.max_in_flight = cap
    if code != 0:
        raise SystemExit("the critical-path probe failed (see above)")
    return span


def measure(
    name: str, server: ScriptedServer, n: int, work: Path, template: Path, joblib_jobs: int, extra: tuple[str, ...] = ()
) -> SweepFigures:
    """One launcher's sweep, as figures (``extra``: more overrides, e.g. ``tracking.instance_traces=true``)."""
    launcher = LAUNCHERS[name] + ((f"hydra.launcher.n_jobs={joblib_jobs}",) if name == "joblib" else ())
    wall, span, code, bodies = run_sweep(server, launcher, ("-m", *CARD, f"limit={n}", *extra), work, template)
    return SweepFigures(
        name,
        wall,
        span,
        len(bodies) + server.rejected,
        len(bodies),
        len({_digest(b) for b in bodies}),
        server.rejected,
        server.peak_in_flight,
        code,
        tuple(_LAST_TIMELINE),
        *_LAST_EDGES,
    )


def warm_template(server: ScriptedServer, work: Path) -> Path:
    """Build the BM25 index and the demo set once (outside every measurement)."""
    cache = work / "cache"
    run_sweep(
        server, (), ("clarifier=gpt", "k=1", "limit=1", "services.llm.cache.mode=off"), work, Path(tempfile.mkdtemp())
    )
    return cache


def report(rows: list[SweepFigures], ideal_latency: float, critical: float, latency: float, cap: int) -> None:
    """Print the side-by-side table."""
    print(f"critical path of one instance: {critical:.2f} s; latency {latency:g} s; server cap {cap}")
    head = (
        f"{'launcher':<8} {'wall_s':>7} {'req_s':>7} {'ideal_s':>7} {'eff_wall':>8} {'eff_req':>7} "
        f"{'sent':>6} {'distinct':>8} {'dup':>5} {'429':>5} {'429%':>6} {'peak':>5} {'exit':>4}"
    )
    print(head)
    for r in rows:
        ideal = max(critical, r.distinct * latency / cap)
        print(
            f"{r.launcher:<8} {r.wall_s:7.1f} {r.request_s:7.1f} {ideal:7.1f} {ideal / r.wall_s:8.3f} "
            f"{ideal / max(r.request_s, 1e-9):7.3f} {r.served:6d} {r.distinct:8d} {r.served - r.distinct:5d} "
            f"{r.rejected:5d} {100 * r.rejected / max(1, r.received):6.2f} {r.peak_in_flight:5d} {r.exit_code:4d}"
        )
    for r in rows:
        print(
            f"  {r.launcher}: first request after {r.lead_s:.1f} s, exit {r.tail_s:.1f} s after the last reply; "
            "in flight per 2 s: " + " ".join(f"{x:.0f}" for x in r.timeline)
        )


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="instances per job")
    parser.add_argument("--latency", type=float, default=0.5, help="server latency per call, seconds")
    parser.add_argument("--cap", type=int, default=32, help="server answers 429 above this many in flight")
    parser.add_argument("--retry-after", type=float, default=None, help="Retry-After sent with the 429s")
    parser.add_argument("--launcher", default="basic,joblib,cts", help="comma-separated: basic, joblib, cts")
    parser.add_argument("--joblib-jobs", type=int, default=3, help="hydra.launcher.n_jobs for joblib")
    parser.add_argument("--fresh-store", action="store_true", help="each sweep creates its MLflow store (timed)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="sweeps per launcher (the same command varies run to run)"
    )
    parser.add_argument(
        "--extra",
        nargs="*",
        default=[],
        help="more overrides for every sweep (tracking.instance_traces=true: with per-instance traces)",
    )
    args = parser.parse_args()
    global _STORE
    names = [x.strip() for x in args.launcher.split(",") if x.strip()]
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(args.latency, True, args.cap, args.retry_after) as server:
        template = warm_template(server, Path(tmp) / "warm")
        _STORE = None if args.fresh_store else empty_store(Path(tmp) / "store")
        critical = critical_path(server, Path(tmp) / "probe", template)
        rows = []
        for name in names:
            for i in range(args.repeat):
                row = measure(
                    name, server, args.n, Path(tmp) / f"{name}-{i}", template, args.joblib_jobs, tuple(args.extra)
                )
                rows.append(row)
                report(rows[-1:], args.latency, critical, args.latency, args.cap)
        print()
        report(rows, args.latency, critical, args.latency, args.cap)


if __name__ == "__main__":
    main()
