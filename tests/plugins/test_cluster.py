"""Cluster runs on real services: Slurm via submitit, the cache on PostgreSQL, `mlflow server`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cts import tracking
from hydra_plugins.cts_slurm_launcher.cluster import literal_secrets
from tests.llm_fakes import protocol_reply
from tests.prewarmed import run_script
from tests.runs import METRICS, REPO, run_py

# One xdist worker runs the whole module: the session's PostgreSQL, munge and Slurm start once.
pytestmark = pytest.mark.xdist_group("cluster")

CANARY = "sk-canary-7f3e9b1d2c"
SLURM = (
    "hydra/launcher=slurm",
    "hydra.launcher.partition=debug",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    "hydra.launcher.timeout_min=20",
)
N_SCANCEL = 4  # instances a job in the scancel test
LIMIT = 40  # instances a job: enough to compare Slurm with one process; the full set is test_multirun's
GRID = ("clarifier=rules_scope,none", "k=1,2")  # 4 jobs: an array of several tasks over two swept factors
N_JOBS = 4


def test_resolved_secrets_are_masked_in_params_and_written_configs():
    from cts._util.secrets import scrub_tree
    from cts.tracking import flatten

    cfg = {
        "services": {"llm": {"api_key": CANARY, "cache": {"url": "postgresql://u:pw@h/db"}}},
        "model": {"input_cost_per_token": 1e-6, "api_key_env": "OPENAI_API_KEY"},
    }
    assert CANARY not in json.dumps(flatten(cfg)) and CANARY not in json.dumps(scrub_tree(cfg))
    assert flatten(cfg)["services.llm.cache.url"] == "postgresql://u:***@h/db"
    assert flatten(cfg)["model.api_key_env"] == "OPENAI_API_KEY" and scrub_tree(cfg)["model"] == cfg["model"]


def test_literal_secrets_are_refused_interpolations_pass():
    assert literal_secrets(["services.llm.api_key=sk-1", "services.llm.cache.url=postgresql://u:pw@h/db"]) == [
        "services.llm.api_key",
        "services.llm.cache.url",
    ]
    assert (
        literal_secrets(
            [
                "services.llm.api_key=${oc.env:KEY}",
                r"services.llm.api_key=$\{oc.env\:KEY\}",
                "services.llm.cache.url=postgresql://u@h/db",
                "k=1,2",
                "services.llm.api_key=null",
            ]
        )
        == []
    )


@pytest.fixture(scope="module")
def warm_cache(services):  # noqa: ANN001,ANN201 - cts.compose.services.Services
    """Build the demo set and its index once, before tests start concurrent jobs on this cache.

    On a cold cache every concurrent job would build them at once (one wins, the rest is
    wasted CPU); after earlier tests this only loads them.
    """
    from cts.demo.loading import load_demo

    load_demo(services.corpus, services.index, services.cache_dir, n=200, seed=0)


# --------------------------------------------------------------------------- cache on PostgreSQL

_WRITER = """
import asyncio, json, sys
from cts.llm.cache import ResponseCache
url, me, n, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cache = ResponseCache(url)
async def compute(i):
    with open(log, "a") as f:
        f.write(f"{i}\\n")
    await asyncio.sleep(0.05)
    return {"i": i, "text": "答案"}
async def main():
    errors = 0
    async def one(i):
        nonlocal errors
        try:
            value, _ = await cache.get_or_compute(f"k{i}", lambda: compute(i))
            assert value["i"] == i
            cache.put(f"k{i}", value)  # a second writer of the same key
        except Exception as exc:
            errors += 1
            print(repr(exc), file=sys.stderr)
    await asyncio.gather(*(one(i) for i in range(n)))
    print(json.dumps({"errors": errors}))
asyncio.run(main())
"""


@pytest.mark.slow
def test_four_processes_write_overlapping_keys_to_postgres(pg, tmp_path):
    url, log = pg.create_db("cache4"), tmp_path / "computed.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, url, str(i), "60", str(log)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [e for _, e in outs]
    assert [json.loads(o)["errors"] for o, _ in outs] == [0] * 4
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT key, COUNT(*) FROM responses GROUP BY key").fetchall()
        claims = conn.execute("SELECT COUNT(*) FROM responses_claims").fetchone()[0]
    assert len(rows) == 60 and {n for _, n in rows} == {1} and claims == 0
    computed = log.read_text().split()
    assert sorted(computed, key=int) == [str(i) for i in range(60)]  # each key computed by one process only


@pytest.mark.slow
def test_three_concurrent_jobs_sharing_the_orig_arm_send_each_request_once(
    pg, tmp_path, llm_server, cache_dir, warm_cache
):
    llm_server.handler = protocol_reply
    llm_server.latency_s = 0.05  # keep the three jobs' identical orig-arm calls overlapping
    url = pg.create_db("cache3")
    run_py(
        "-m",
        "clarifier=gpt,ernie,claude",
        "k=1",
        "limit=3",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=3",
        f"services.llm.api_base={llm_server.base_url}",
        f"services.llm.cache.url={url}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={cache_dir}",
        "sweep_report=false",
        cwd=tmp_path,
    )
    bodies = [json.dumps(body, sort_keys=True) for body in llm_server.bodies()]
    assert bodies and len(bodies) == len(set(bodies)), f"{len(bodies) - len(set(bodies))} requests sent twice"
    records = [r for rows in _job_records(tmp_path / "sweep").values() for r in rows]
    assert len(records) == 9 and not [r["error"] for r in records if r["error"]]


# --------------------------------------------------------------------------- Slurm


def _job_records(sweep: Path) -> dict[str, list[dict]]:
    return {
        str(f.parent.relative_to(sweep)): [json.loads(x) for x in f.read_text().splitlines()]
        for f in sweep.rglob("records.jsonl")
    }


def _stable(record: dict) -> str:
    # Wall-clock fields differ between any two runs; everything else must match.
    def strip(obj):
        if isinstance(obj, dict):
            return {
                k: strip(v)
                for k, v in obj.items()
                if "latency" not in k and not k.endswith(("_s", "trace_id", "request_id"))
            }
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj

    return json.dumps(strip(record), sort_keys=True, ensure_ascii=False)


def _grep(root: Path, needle: str) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and needle.encode() in path.read_bytes():
            hits.append(str(path))
    return hits


@pytest.mark.slow
def test_offline_sweep_on_slurm_with_mlflow_server_and_postgres_cache(
    tmp_path, slurm_cluster, mlflow_server, pg, cache_dir, warm_cache, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)  # jobs inherit it; it must be written nowhere
    monkeypatch.setenv("CTS_TEST_KEY", CANARY)  # also read by the config, resolved inside the jobs
    cache_url = pg.create_db("sweepcache")
    sweep, local = tmp_path / "slurm", tmp_path / "local"
    common = (
        "-m",
        "experiment=offline",
        *GRID,
        f"limit={LIMIT}",
        f"paths.cache_dir={cache_dir}",
        f"services.llm.cache.url={cache_url}",
        "services.llm.api_key=${oc.env:CTS_TEST_KEY}",
    )
    # The same sweep in one process: the reference the Slurm jobs' records must match.
    run_py(
        *common,
        f"hydra.sweep.dir={local}",
        f"tracking.uri=sqlite:///{tmp_path}/local.db",
        "sweep_report=false",
        cwd=tmp_path,
    )
    out = run_py(*common, *SLURM, f"hydra.sweep.dir={sweep}", f"tracking.uri={mlflow_server.uri}", cwd=tmp_path)

    runs = tracking.search_runs(mlflow_server.uri)
    jobs = runs[(runs["tags.cts.kind"] == "job") & runs["tags.cts.sweep_dir"].str.endswith("slurm")]
    assert len(jobs) == N_JOBS and set(jobs["status"]) == {"FINISHED"}
    for name in METRICS:  # ua_unknown_rate is NaN where nothing was asked (clarifier=none)
        assert f"metrics.{name}" in jobs, name
    assert jobs["metrics.score_mean"].notna().all() and (jobs["metrics.n_instances"] == LIMIT).all()
    assert len(_array_results(sweep)) == N_JOBS  # all ran as Slurm jobs
    # The report: built once (not also by the waiting submitter), by the dependent job, after the last job.
    assert (runs["tags.cts.kind"] == "sweep_report").sum() == 1 and (sweep / "report" / "report.md").is_file()
    assert re.search(r"sweep report \(\d+ jobs\) written to", _job_log(sweep, _report_job(out.stdout + out.stderr)))
    assert _mtime(sweep / "report" / "report.md") >= max(map(_mtime, _array_results(sweep)))

    on_slurm = _job_records(sweep)
    on_one = {job.replace(",sweep_report=False", ""): rows for job, rows in _job_records(local).items()}
    assert sorted(on_slurm) == sorted(on_one) and len(on_slurm) == N_JOBS
    for job, records in on_slurm.items():
        # Records stream in completion order, which concurrency varies: compare them by id.
        assert sorted(map(_stable, records)) == sorted(map(_stable, on_one[job])), job

    leaks = _grep(sweep, CANARY) + _grep(mlflow_server.artifact_root, CANARY)  # the report job's files too
    assert not leaks, leaks
    dump = subprocess.run(
        ["pg_dumpall", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "experiment" in dump and CANARY not in dump  # the MLflow store (and the cache)


@pytest.mark.slow
def test_wait_false_returns_once_queued_and_a_dependent_job_builds_the_report(
    tmp_path, slurm_cluster, cache_dir, warm_cache
):
    sweep, db = tmp_path / "sweep", tmp_path / "mlflow.db"
    proc = run_py(
        "-m",
        "experiment=offline",
        "clarifier=rules_scope,none",
        "k=1",
        "limit=5",
        *SLURM,
        "hydra.launcher.wait=false",
        f"hydra.sweep.dir={sweep}",
        f"tracking.uri=sqlite:///{db}",
        f"paths.cache_dir={cache_dir}",
        cwd=tmp_path,
    )
    out, report = proc.stdout + proc.stderr, sweep / "report" / "report.md"
    queued = re.search(r"follow with: squeue -j (\S+)", out)
    assert queued and "not waiting" in out, out[-3000:]
    ids = queued.group(1).split(",")
    pending = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ids[-1]], capture_output=True, text=True).stdout
    assert ids[-1] in pending and not report.exists()  # the submitter returned with the report still to come
    assert f"sweep report: Slurm job {ids[-1]} (after array {ids[0]})" in out and str(report) in out

    deadline = time.monotonic() + 300
    while subprocess.run(["squeue", "-h", "-j", ",".join(ids)], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, "jobs still queued"
        time.sleep(1)
    assert report.is_file() and len(_array_results(sweep)) == 2
    assert _mtime(report) >= max(map(_mtime, _array_results(sweep)))  # built after the last job ended
    assert re.search(r"sweep report \(\d+ jobs\) written to", _job_log(sweep, ids[-1]))
    runs = tracking.search_runs(f"sqlite:///{db}")
    assert sorted(runs["tags.cts.kind"]) == ["job", "job", "sweep_report"]


def _array_results(sweep: Path) -> list[Path]:
    return list((sweep / ".submitit").glob("*_*/*_*_0_result.pkl"))  # <array>_<task>: not the report job


def _report_job(out: str) -> str:
    found = re.search(r"sweep report written to \S+ by Slurm job (\d+)", out)
    assert found, out[-3000:]
    return found.group(1)


def _job_log(sweep: Path, job_id: str) -> str:
    return "".join(p.read_text() for p in (sweep / ".submitit" / job_id).glob(f"{job_id}_0_log.*"))


def _mtime(path: Path) -> float:
    return path.stat().st_mtime


@pytest.mark.slow
def test_scancel_one_slurm_job_then_rerun_gives_every_instance_once(
    tmp_path, slurm_cluster, llm_server, pg, cache_dir, warm_cache
):
    # Two jobs (one cancelled, one that must go on), N instances one at a time, each LLM call
    # slow enough that the cancelled job is caught with some records written and some not.
    llm_server.handler = protocol_reply
    llm_server.latency_s = 0.2
    sweep = tmp_path / "sweep"
    args = [
        sys.executable,
        str(REPO / "run.py"),
        "-m",
        "clarifier=gpt,claude",
        "k=1",
        f"limit={N_SCANCEL}",
        "concurrency=1",
        f"services.llm.api_base={llm_server.base_url}",
        f"services.llm.cache.url={pg.create_db('scancel')}",
        *SLURM,
        f"hydra.sweep.dir={sweep}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={cache_dir}",
        "sweep_report=false",
    ]
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    first = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    subprocess.run(["scancel", _wait_for_a_started_job(sweep, first)], check=True)
    out, _ = first.communicate(timeout=300)
    assert first.returncode != 0 and "ended" in out, out[-3000:]  # the sweep reports the cancelled job

    rerun = run_script(args[1:], cwd=tmp_path, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    records = _job_records(sweep)
    assert len(records) == 2
    for job, rows in records.items():
        ids = [r["id"] for r in rows]
        assert len(ids) == N_SCANCEL and len(set(ids)) == N_SCANCEL, (job, ids)


def _wait_for_a_started_job(sweep: Path, proc: subprocess.Popen, timeout_s: float = 240) -> str:
    """The Slurm id (``<array>_<task>``) of a running job that has written some of its records."""
    from omegaconf import OmegaConf

    deadline, seen = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"sweep ended first; records seen: {seen}\n" + (
            proc.stdout.read()[-3000:] if proc.stdout else ""
        )
        running = subprocess.run(
            ["squeue", "-h", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True
        ).stdout.split()
        for records in sweep.rglob("records.jsonl"):
            lines = records.read_text().count("\n")
            seen[records.parent.name[:40]] = lines
            num = OmegaConf.load(records.parent / ".hydra" / "hydra.yaml").hydra.job.num
            match = [job for job in running if job.endswith(f"_{num}")]
            if 1 <= lines < N_SCANCEL and match:
                return match[0]
        time.sleep(0.1)
    raise AssertionError(f"no job started writing records: {seen}")
