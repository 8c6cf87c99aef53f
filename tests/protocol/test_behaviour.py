"""Behaviour pinned across refactors: small fixed sweeps must reproduce committed digests.

The fixture holds, per job of each sweep, the sha256 of every record's canonical JSON
(timing fields removed) and the job's metrics (timing metrics removed). Records carry
corpus text, so only digests are committed. Regenerate the fixture (only from code whose
behaviour is the reference) with ``CTS_WRITE_BEHAVIOUR_FIXTURE=1``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.runs import run_py

FIXTURE = Path(__file__).parents[1] / "fixtures" / "behaviour.json"
TIMING_KEYS = frozenset({"elapsed_s", "latency_s"})
OFFLINE = ("-m", "experiment=offline", "clarifier=rules_scope,rules_region,none", "k=1,2", "limit=12")
CARD = ("-m", "clarifier=gpt,ernie,claude", "k=1,2", "limit=2")


def untimed(value: Any) -> Any:
    """``value`` without timing fields, at any depth."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in TIMING_KEYS and not k.startswith("latency")}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def digest(record: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of one record without timing fields."""
    text = json.dumps(untimed(record), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def job_view(job_dir: Path) -> dict[str, Any]:
    """Record digests by instance id and untimed metrics of one job dir."""
    records = [json.loads(x) for x in (job_dir / "records.jsonl").read_text().splitlines() if x.strip()]
    metrics = json.loads((job_dir / "summary.json").read_text())["metrics"]
    return {
        "records": {r["id"]: digest(r) for r in sorted(records, key=lambda r: r["id"])},
        "metrics": untimed(metrics),
    }


def sweep_view(sweep: Path) -> dict[str, Any]:
    """Every job of a sweep dir, keyed by its clarifier option and k."""
    jobs = {}
    for path in sorted(sweep.rglob("summary.json")):
        summary = json.loads(path.read_text())
        jobs[f"{summary['choices']['clarifier']},k={summary['k']}"] = job_view(path.parent)
    return jobs


def check(name: str, view: dict[str, Any]) -> None:
    """Compare with (or, when asked, write) the committed fixture."""
    data = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
    if os.environ.get("CTS_WRITE_BEHAVIOUR_FIXTURE"):
        FIXTURE.write_text(json.dumps({**data, name: view}, indent=1, sort_keys=True) + "\n")
        return
    want = data[name]
    assert sorted(view) == sorted(want)
    for job in want:
        assert view[job]["metrics"] == want[job]["metrics"], job
        changed = [i for i in want[job]["records"] if view[job]["records"].get(i) != want[job]["records"][i]]
        assert sorted(view[job]["records"]) == sorted(want[job]["records"]) and not changed, (job, changed)


def common(tmp_path: Path, cache_dir: Path) -> tuple[str, ...]:
    """Sweep options; a cache of its own (index and demo set copied) so that the tool cache starts cold."""
    own = tmp_path / "cache"
    for part in ("index", "demo"):
        if (cache_dir / part).is_dir():
            shutil.copytree(cache_dir / part, own / part)
    return (
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={own}",
        "sweep_report=false",
    )


@pytest.mark.slow
def test_offline_sweep_reproduces_the_fixture(tmp_path, cache_dir):
    run_py(*OFFLINE, *common(tmp_path, cache_dir), cwd=tmp_path)
    check("offline", sweep_view(tmp_path / "sweep"))


@pytest.mark.slow
def test_card_sweep_over_the_local_server_reproduces_the_fixture(tmp_path, llm_server, cache_dir):
    from tests.llm_fakes import protocol_reply

    llm_server.handler = protocol_reply
    run_py(
        *CARD,
        *common(tmp_path, cache_dir),
        f"services.llm.api_base={llm_server.base_url}",
        f"services.llm.cache.path={tmp_path}/llm_cache.sqlite",
        "concurrency=1",
        # The fixture's per-job counters (search calls, cache hits) are those of jobs run one after
        # another; the cts launcher shares the orig arm across jobs (same records: test_sweep_launcher).
        "hydra/launcher=basic",
        cwd=tmp_path,
    )
    check("card", sweep_view(tmp_path / "sweep"))
