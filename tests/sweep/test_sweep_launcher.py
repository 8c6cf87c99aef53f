"""hydra/launcher=cts: one schedule for the whole sweep, the same records as the basic launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cts import tracking
from tests.llm_fakes import protocol_reply, sweep_reply
from tests.prewarmed import run_script
from tests.runs import REPO, run_py

CARD = ("-m", "clarifier=gpt,ernie,claude", "k=1,2,3")
OFFLINE = ("-m", "experiment=offline", "clarifier=rules_scope,rules_region,none", "k=1,2")


def _records(sweep: Path) -> dict[tuple[str, str], tuple[Any, ...]]:
    """Per job dir and instance: what the protocol produced (scores, questions, answers, labels)."""
    out = {}
    for path in sweep.glob("*/records.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            arms = tuple(
                (a or {}).get(f) for a in (r["clarified"], r["orig"]) for f in ("query", "answer", "labels", "score")
            )
            out[(path.parent.name, r["id"])] = (r["questions"], r["answers"], r["rewritten_query"], arms)
    return out


def _sweep(tmp_path: Path, name: str, *args: str) -> Path:
    sweep = tmp_path / name
    run_py(
        *args,
        f"hydra.sweep.dir={sweep}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"services.llm.cache.path={tmp_path}/{name}_llm.sqlite",
        "sweep_report=false",
        "judge_anchors.check=false",  # a scripted judge: the anchor check (docs/judges.md) would refuse it before the run
        cwd=tmp_path,
    )
    return sweep


def _digest(body: Any) -> str:
    return json.dumps(body, sort_keys=True)


@pytest.mark.slow
def test_card_sweep_same_records_under_cts_as_basic_and_each_request_sent_once(tmp_path, llm_server, cache_dir):
    llm_server.handler = sweep_reply  # the rewrite changes the query: system arms search too
    llm_server.latency_s = 0.05
    common = (*CARD, "limit=3", f"services.llm.api_base={llm_server.base_url}", f"paths.cache_dir={cache_dir}")
    basic = _sweep(tmp_path, "basic", *common, "hydra/launcher=basic")
    llm_server.requests.clear()
    cts = _sweep(tmp_path, "cts", *common, "hydra/launcher=cts", "hydra.launcher.progress=false")
    bodies = [_digest(r.body) for r in llm_server.requests]
    assert bodies and len(bodies) == len(set(bodies))  # jobs ran together, yet no request went out twice
    assert _records(cts) == _records(basic) and len(_records(cts)) == 27
    runs = tracking.search_runs(f"sqlite:///{tmp_path}/mlflow.db")
    jobs = runs[(runs["tags.cts.kind"] == "job") & runs["tags.cts.sweep_dir"].str.endswith("cts")]
    assert len(jobs) == 9 and set(jobs["status"]) == {"FINISHED"} and (jobs["metrics.n_unscored"] == 0).all()


@pytest.mark.slow
def test_orig_arm_is_searched_and_judged_once_per_instance_per_sweep(tmp_path, llm_server, cache_dir):
    """With every cache off nothing else dedups: the 9 jobs' orig arms are one computation per instance."""
    llm_server.handler = sweep_reply
    n = 2
    sweep = _sweep(
        tmp_path,
        "cts",
        *CARD,
        f"limit={n}",
        f"services.llm.api_base={llm_server.base_url}",
        f"paths.cache_dir={cache_dir}",
        "services.llm.cache.mode=off",
        "hydra/launcher=cts",
        "hydra.launcher.progress=false",
    )
    records = [json.loads(x) for p in sweep.glob("*/records.jsonl") for x in p.read_text().splitlines()]
    assert len(records) == 9 * n and not [r["error"] for r in records if r["error"]]
    blurred = {r["orig"]["query"] for r in records}
    assert len(blurred) == n and all(r["clarified"]["query"] not in blurred for r in records)
    users = [_user(r.body) for r in llm_server.requests]
    first_turns = [u.rsplit("User:", 1)[-1].strip() for u, m in users if "<tools>" in u and m == 1]
    assert sorted(q for q in first_turns if q in blurred) == sorted(blurred)  # one orig search per instance
    judged = [u for u, _ in users if "Nuggets:" in u]
    # per instance: the orig arm once and the 9 jobs' system arms (each job judging its own orig: 18)
    assert len(judged) == n * (1 + 9)
    for r in records:  # every job's record still carries the (shared) orig arm
        assert r["orig"]["score"] is not None and r["orig"]["labels"]


def _user(body: Any) -> tuple[str, int]:
    """The first user message and how many user messages (1 = the agent's first turn)."""
    users = [str(m.get("content", "")) for m in body.get("messages", []) if m.get("role") == "user"]
    return (users[0] if users else ""), len(users)


@pytest.mark.slow
def test_offline_sweep_same_records_under_cts_as_basic(tmp_path, cache_dir):
    common = (*OFFLINE, "limit=15", f"paths.cache_dir={cache_dir}")
    basic = _sweep(tmp_path, "basic", *common)
    cts = _sweep(tmp_path, "cts", *common, "hydra/launcher=cts", "hydra.launcher.progress=false")
    assert _records(cts) == _records(basic) and len(_records(cts)) == 6 * 15


@pytest.mark.slow
def test_a_failing_job_does_not_stop_the_others_and_the_exit_code_says_so(tmp_path, cache_dir):
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    sweep = tmp_path / "sweep"
    foreign = sweep / "k=3"  # a dir of another configuration: that job is refused (a bad k is refused before the sweep)
    foreign.mkdir(parents=True)
    (foreign / "fingerprint.json").write_text('{"fingerprint": "0000000000000000"}')
    (foreign / "records.jsonl").write_text('{"id": "x", "k": 3}\n')
    proc = run_script(
        [
            str(REPO / "run.py"),
            "-m",
            "experiment=offline",
            "clarifier=none",
            "k=1,3,2",
            "limit=5",
            "hydra/launcher=cts",
            f"hydra.sweep.dir={sweep}",
            f"tracking.uri=sqlite:///{tmp_path}/m.db",
            f"paths.cache_dir={cache_dir}",
            "sweep_report=false",
        ],
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert proc.returncode != 0 and "holds records of another configuration" in proc.stdout + proc.stderr
    done = sorted(p.parent.name for p in sweep.glob("*/records.jsonl") if p.parent != foreign)
    assert done == ["k=1", "k=2"]  # jobs are named by the swept factors
    assert all(len((sweep / d / "records.jsonl").read_text().splitlines()) == 5 for d in done)


@pytest.mark.slow
def test_the_spend_limit_applies_to_the_whole_sweep_and_stops_every_job_cleanly(tmp_path, llm_server, cache_dir):
    llm_server.handler = protocol_reply
    llm_server.latency_s = 0.05
    sweep = _sweep(
        tmp_path,
        "cts",
        *CARD,
        "limit=6",
        f"services.llm.api_base={llm_server.base_url}",
        f"paths.cache_dir={cache_dir}",
        "services.llm.spend.max_usd=0.002",
        "hydra/launcher=cts",
        "services.llm.api_base_price.input_cost_per_token=1e-6",
        "services.llm.api_base_price.output_cost_per_token=4e-6",
        "hydra.launcher.progress=false",
    )
    summaries = [json.loads(p.read_text()) for p in sweep.glob("*/summary.json")]
    assert len(summaries) == 9 and {s["stop_reason"] for s in summaries} == {"spend_limit"}
    spent = sum(s["metrics"]["cost_usd"] for s in summaries)
    assert spent < 0.002 * 2  # one cap for the sweep (a few calls in flight finish), not 9 caps
