"""Sweep benchmark: the card's multirun and the paper's grid against the local server.

Runs ``python run.py -m clarifier=gpt,ernie,claude k=1,2,3 limit=N`` (the card; ``--shape paper``:
the 7 clarifiers of the paper's Table 2 x k=1,2,3, 21 jobs) with every role, WebDancer with
search and visit turns over the offline corpus, and every model routed to ``ScriptedServer`` of
``tests/llm_fakes.py`` started here with a per-call latency ``L`` and a hard cap ``C`` (429 above C
calls in flight), once per launcher, each with fresh LLM and tool caches and the default settings
(per-instance traces and the sweep report on; ``--extra`` adds overrides). The server keeps
connections alive (HTTP/1.1, as every hosted provider does) or, with ``--http 1.0``, closes each.
Its clarifiers all ask the same questions (``sweep_reply``: the jobs of one k share their UA
answers, rewrites and system arms through the response cache) or, with ``--questions distinct``,
each model its own (``distinct_sweep_reply``: only the orig arm is shared, as with real models).

For each sweep it prints the wall time of the command and of its request phase (first request to
last reply) against the ideal ``max(critical path of one instance, distinct requests x L / C)``,
the requests the server served against the distinct ones, the 429 count, and, read from ``/proc``
while it runs, the CPU the sweep's process spent per request served (start-up, composition, the
report and everything else included), the CPU of its other processes (the trace writer) and the
peak RSS of the process tree::

    python benchmarks/sweep_bench.py --n 48 --latency 0.5 --cap 16 --launcher cts            # the card
    python benchmarks/sweep_bench.py --shape paper --n 100 --latency 0.5 --cap 64 --launcher cts
    python benchmarks/sweep_bench.py --shape paper --n 518 --latency 0.05 --cap 64 --launcher cts --no-critical  # memory
    python benchmarks/sweep_bench.py --n 50 --latency 0.5 --cap 32 --launcher basic,joblib,cts [--repeat 3]

``--n`` above the demo set's size synthesises a larger set (demo instances under new ids, as
``bench_memory.py`` does). The critical path is measured first: one instance of the longest job
(k=3) alone, with no cap. Each sweep writes to an MLflow store that already exists (a copy of an
empty one made once), as a user's ``outputs/mlflow.db`` does after the first run: creating a SQLite
store runs MLflow's migrations (4-8 s here), once per store, not per sweep; ``--fresh-store``
counts it. This is a benchmark to read, not a test: nothing here asserts.
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

from machine import reference_cpu_s  # noqa: E402  (benchmarks/machine.py, beside this script)

from tests.llm_fakes import ScriptedServer, distinct_sweep_reply, sweep_reply  # noqa: E402  (tests/ holds the fake server)

SHAPES = {
    "card": ("clarifier=gpt,ernie,claude", "k=1,2,3"),
    "paper": ("clarifier=gpt,ernie,claude,gemini,deepseek,kimi,qwen", "k=1,2,3"),
}
LAUNCHERS = {
    "basic": ("hydra/launcher=basic",),
    "joblib": ("hydra/launcher=joblib",),
    "cts": ("hydra/launcher=cts", "hydra.launcher.progress=false"),
}
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class SweepFigures:
    """What one launcher's sweep did against the server."""

    launcher: str
    wall_s: float
    """The whole command, Python start-up, the report and MLflow included."""
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
    """Last reply to the command's exit (traces, the report, MLflow, shut-down)."""
    cpu_s: float = 0.0
    """CPU seconds of the sweep's own process (user + system)."""
    other_cpu_s: float = 0.0
    """CPU seconds of its child processes (the trace writer, joblib's workers)."""
    peak_rss_mb: float = 0.0
    """Peak resident memory of the process tree (sampled every 0.1 s)."""
    sweep_rss_mb: float = 0.0
    """Peak resident memory of the sweep's own process."""


def _digest(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _fresh_cache(template: Path, into: Path) -> Path:
    """A cache dir with the BM25 index and the demo set, but no LLM or tool cache."""
    into.mkdir(parents=True)
    for name in ("index", "demo"):
        if (template / name).exists():
            shutil.copytree(template / name, into / name)
    return into


class _Tree:
    """Samples a process tree from ``/proc``: CPU seconds per process, and the peak of the summed RSS."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.cpu: dict[int, float] = {}
        self.peak_rss = 0
        self.peak_by_pid: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Tree:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.sample()

    def sample(self) -> None:
        """Read CPU and RSS of the root and its descendants once."""
        parents: dict[int, int] = {}
        stats: dict[int, list[str]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
            stats[int(entry)] = fields
        tree = {self.root}
        grew = True
        while grew:
            more = {pid for pid, ppid in parents.items() if ppid in tree} - tree
            tree |= more
            grew = bool(more)
        rss = 0
        for pid in tree & stats.keys():
            fields = stats[pid]
            self.cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime
            rss += int(fields[21]) * _PAGE
            self.peak_by_pid[pid] = max(self.peak_by_pid.get(pid, 0), int(fields[21]) * _PAGE)
        self.peak_rss = max(self.peak_rss, rss)


def run_sweep(
    server: ScriptedServer, launcher: tuple[str, ...], overrides: tuple[str, ...], work: Path, template: Path
) -> tuple[float, float, int, list[Any]]:
    """Run one sweep command; return wall time, request span, exit code and the served bodies.

    Also sets ``_LAST`` (timeline, lead and tail seconds, CPU and RSS figures).
    """
    server.reset()
    server.handler = _REPLY[0]
    server.rejected = server.served = server.peak_in_flight = 0
    cache = _fresh_cache(template, work / "cache")
    if _STORE and _STORE.exists():
        shutil.copy(_STORE, work / "mlflow.db")
    profile = (
        ["py-spy", "record", "--gil", "--threads", "-r", "200", "-f", "raw", "-o", _PROFILE, "--"] if _PROFILE else []
    )
    args = [
        *profile,
        sys.executable,
        str(REPO / "run.py"),
        *overrides,
        *launcher,
        f"services.llm.api_base={server.base_url}",
        f"paths.cache_dir={cache}",
        f"tracking.uri=sqlite:///{work}/mlflow.db",
        f"hydra.sweep.dir={work}/sweep",
        f"hydra.run.dir={work}/run",
    ]
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "PYTHONPATH": str(REPO)}
    start = time.monotonic()
    with _Sampler(server) as sampler:
        proc = subprocess.Popen(args, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with _Tree(proc.pid) as tree:
            out, err = proc.communicate()
            tree.sample()
    end = time.monotonic()
    wall = end - start
    _LAST.update(
        timeline=sampler.timeline(),
        cpu=tree.cpu.get(proc.pid, 0.0),
        other=sum(v for pid, v in tree.cpu.items() if pid != proc.pid),
        rss=tree.peak_rss / 2**20,
        sweep_rss=tree.peak_by_pid.get(proc.pid, 0) / 2**20,
    )
    if _STDERR:
        Path(_STDERR).write_text(err, encoding="utf-8")
    if proc.returncode != 0:
        print(out[-2000:], err[-4000:], file=sys.stderr)
    times = [r.time for r in server.requests]
    span = (max(times) - min(times) + server.latency_s) if times else 0.0
    _LAST["edges"] = [min(times) - start, end - max(times) - server.latency_s] if times else [0.0, 0.0]
    return wall, span, proc.returncode, [r.body for r in server.requests]


_LAST: dict[str, Any] = {}
_PROFILE = ""
_REPLY: list[Any] = [sweep_reply]
"""The server's replies: ``--questions shared`` (``sweep_reply``) or ``distinct`` (``distinct_sweep_reply``)."""
"""``--profile``: py-spy's collapsed stacks of the measured sweeps are written here (its CPU figures then count py-spy)."""
_STDERR = ""
"""``--stderr``: the last measured sweep's standard error is written here."""
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


def critical_path(server: ScriptedServer, work: Path, template: Path, data: tuple[str, ...]) -> float:
    """Request span of one instance of the k=3 job alone, no cap: the sweep cannot beat it."""
    cap, server.max_in_flight = server.max_in_flight, None
    try:
        _, span, code, _ = run_sweep(server, (), ("clarifier=gpt", "k=3", "limit=1", *data), work, template)
    finally:
        server.max_in_flight = cap
    if code != 0:
        raise SystemExit("the critical-path probe failed (see above)")
    return span


def measure(
    name: str,
    server: ScriptedServer,
    shape: tuple[str, ...],
    n: int,
    work: Path,
    template: Path,
    joblib_jobs: int,
    extra: tuple[str, ...] = (),
) -> SweepFigures:
    """One launcher's sweep, as figures (``extra``: more overrides, e.g. ``tracking.instance_traces=false``)."""
    launcher = LAUNCHERS[name] + ((f"hydra.launcher.n_jobs={joblib_jobs}",) if name == "joblib" else ())
    wall, span, code, bodies = run_sweep(server, launcher, ("-m", *shape, f"limit={n}", *extra), work, template)
    lead, tail = _LAST["edges"]
    return SweepFigures(
        launcher=name,
        wall_s=wall,
        request_s=span,
        received=len(bodies) + server.rejected,
        served=len(bodies),
        distinct=len({_digest(b) for b in bodies}),
        rejected=server.rejected,
        peak_in_flight=server.peak_in_flight,
        exit_code=code,
        timeline=tuple(_LAST["timeline"]),
        lead_s=lead,
        tail_s=tail,
        cpu_s=_LAST["cpu"],
        other_cpu_s=_LAST["other"],
        peak_rss_mb=_LAST["rss"],
        sweep_rss_mb=_LAST["sweep_rss"],
    )


def warm_template(server: ScriptedServer, work: Path) -> Path:
    """Build the BM25 index and the demo set once (outside every measurement)."""
    cache = work / "cache"
    run_sweep(
        server, (), ("clarifier=gpt", "k=1", "limit=1", "services.llm.cache.mode=off"), work, Path(tempfile.mkdtemp())
    )
    return cache


def large_dataset(template: Path, n: int, out: Path) -> tuple[str, ...]:
    """Overrides selecting ``n`` instances: the demo set's, reused under new ids (``bench_memory.synthesise``)."""
    sys.path.insert(0, str(REPO))
    from benchmarks.bench_memory import synthesise
    from cts.compose.services import Services
    from cts.core.types import CacheDir
    from cts.demo import load_demo

    services = Services(cache_dir=template, settings={"corpus_lang": "en-us"})
    demo = load_demo(services.corpus, services.index, CacheDir(services.cache_dir))
    if n <= len(demo.instances):
        return ()
    inst, gold = synthesise(demo, n, out)
    return ("dataset=jsonl", f"dataset.path={inst}", f"dataset.gold_path={gold}", "dataset.name=bench_sweep")


def report(rows: list[SweepFigures], critical: float, latency: float, cap: int) -> None:
    """Print the side-by-side table."""
    print(f"critical path of one instance: {critical:.2f} s; latency {latency:g} s; server cap {cap}")
    head = (
        f"{'launcher':<8} {'wall_s':>7} {'req_s':>7} {'ideal_s':>7} {'eff_wall':>8} {'eff_req':>7} "
        f"{'sent':>6} {'distinct':>8} {'dup':>5} {'429':>5} {'429%':>6} {'peak':>5} "
        f"{'cpu_ms/req':>10} {'other_cpu_s':>11} {'rss_mb':>7} {'sweep_mb':>8} {'exit':>4}"
    )
    print(head)
    for r in rows:
        ideal = max(critical, r.distinct * latency / cap)
        print(
            f"{r.launcher:<8} {r.wall_s:7.1f} {r.request_s:7.1f} {ideal:7.1f} {ideal / r.wall_s:8.3f} "
            f"{ideal / max(r.request_s, 1e-9):7.3f} {r.served:6d} {r.distinct:8d} {r.served - r.distinct:5d} "
            f"{r.rejected:5d} {100 * r.rejected / max(1, r.received):6.2f} {r.peak_in_flight:5d} "
            f"{1000 * r.cpu_s / max(1, r.served):10.2f} {r.other_cpu_s:11.1f} {r.peak_rss_mb:7.0f} {r.sweep_rss_mb:8.0f} "
            f"{r.exit_code:4d}"
        )
    for r in rows:
        print(
            f"  {r.launcher}: first request after {r.lead_s:.1f} s, exit {r.tail_s:.1f} s after the last reply; "
            f"sweep process {r.cpu_s:.1f} s CPU; in flight per 2 s: " + " ".join(f"{x:.0f}" for x in r.timeline)
        )


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="card", help="card: 9 jobs; paper: 21 jobs")
    parser.add_argument("--n", type=int, default=50, help="instances per job (above the demo set's: synthesised)")
    parser.add_argument("--latency", type=float, default=0.5, help="server latency per call, seconds")
    parser.add_argument("--cap", type=int, default=32, help="server answers 429 above this many in flight")
    parser.add_argument("--http", choices=("1.1", "1.0"), default="1.1", help="1.1: keep-alive; 1.0: close each")
    parser.add_argument("--retry-after", type=float, default=None, help="Retry-After sent with the 429s")
    parser.add_argument("--launcher", default="cts", help="comma-separated: basic, joblib, cts")
    parser.add_argument("--joblib-jobs", type=int, default=3, help="hydra.launcher.n_jobs for joblib")
    parser.add_argument("--fresh-store", action="store_true", help="each sweep creates its MLflow store (timed)")
    parser.add_argument("--no-critical", action="store_true", help="skip the critical-path probe (ideal: requests)")
    parser.add_argument("--profile", default="", help="write py-spy's raw stacks of the measured sweep here")
    parser.add_argument("--stderr", default="", help="write the last measured sweep's standard error here")
    parser.add_argument(
        "--repeat", type=int, default=1, help="sweeps per launcher (the same command varies run to run)"
    )
    parser.add_argument(
        "--questions",
        choices=("shared", "distinct"),
        default="shared",
        help="shared: every clarifier model asks the same questions (jobs share UA answers, rewrites and"
        " system arms); distinct: each model its own, as real models do (only the orig arm is shared)",
    )
    parser.add_argument("--keep", default="", help="copy the last sweep's dir (jobs and report) here")
    parser.add_argument(
        "--extra", nargs="*", default=[], help="more overrides for every sweep (tracking.instance_traces=false ...)"
    )
    args = parser.parse_args()
    global _STORE, _PROFILE, _STDERR
    names = [x.strip() for x in args.launcher.split(",") if x.strip()]
    keep_alive = args.http == "1.1"
    _REPLY[0] = distinct_sweep_reply if args.questions == "distinct" else sweep_reply
    reference = reference_cpu_s()
    with (
        tempfile.TemporaryDirectory() as tmp,
        ScriptedServer(args.latency, True, args.cap, args.retry_after, keep_alive=keep_alive) as server,
    ):
        template = warm_template(server, Path(tmp) / "warm")
        data = large_dataset(template, args.n, Path(tmp) / "data")
        _STORE = None if args.fresh_store else empty_store(Path(tmp) / "store")
        critical = 0.0 if args.no_critical else critical_path(server, Path(tmp) / "probe", template, data)
        _PROFILE, _STDERR = args.profile, args.stderr
        print(f"shape {args.shape}, n={args.n}, HTTP/{args.http}, {args.questions} questions", flush=True)
        rows = []
        for name in names:
            for i in range(args.repeat):
                extra = (*data, *args.extra)
                row = measure(
                    name,
                    server,
                    SHAPES[args.shape],
                    args.n,
                    Path(tmp) / f"{name}-{i}",
                    template,
                    args.joblib_jobs,
                    extra,
                )
                rows.append(row)
                report(rows[-1:], critical, args.latency, args.cap)
                if args.keep:  # e.g. to time the sweep report alone on a real sweep's jobs
                    shutil.copytree(Path(tmp) / f"{name}-{i}" / "sweep", args.keep, dirs_exist_ok=True)
        print()
        report(rows, critical, args.latency, args.cap)
    print(f"machine reference (benchmarks/machine.py): {reference:.3f} s CPU before, {reference_cpu_s():.3f} s after")


if __name__ == "__main__":
    main()
