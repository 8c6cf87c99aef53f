"""The card's multirun, end to end over real HTTP, with every LLM role on the scripted server."""

from __future__ import annotations

import json
import shutil

import pytest

from cts import tracking
from tests.llm_fakes import protocol_reply
from tests.runs import run_py

CARD = ("-m", "clarifier=gpt,ernie,claude", "k=1,2,3")


def sweep(tmp_path, server, cache_dir, name: str, *launcher: str):
    args = (
        *CARD,
        "limit=3",
        "sweep_report=false",  # read by no test here
        *launcher,
        f"services.llm.api_base={server.base_url}",
        f"hydra.sweep.dir={tmp_path / name}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={cache_dir}",
        f"services.llm.cache.path={tmp_path}/llm_cache.sqlite",
    )
    run_py(*args, cwd=tmp_path)


@pytest.mark.slow
def test_card_multirun_against_local_server_then_zero_request_rerun(tmp_path, llm_server, cache_dir):
    llm_server.handler = protocol_reply
    sweep(tmp_path, llm_server, cache_dir, "first", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    first = len(llm_server.requests)
    assert first > 0
    assert llm_server.gets == ["/v1/models"]  # the pre-flight probed the sweep's one endpoint once, for 9 jobs

    runs = tracking.search_runs(f"sqlite:///{tmp_path}/mlflow.db")
    jobs = runs[runs["tags.cts.kind"] == "job"]
    assert len(jobs) == 9 and set(jobs["status"]) == {"FINISHED"}
    assert set(jobs["tags.cts.system"]) == {"gpt", "ernie", "claude"}
    assert (jobs["metrics.n_unscored"] == 0).all() and jobs["metrics.score_mean"].notna().all()
    assert (jobs["metrics.llm_calls"] > 0).all()
    # Every role on services.llm.api_base (the user's own server) with no price set: tokens, no cost.
    assert (jobs["metrics.cost_total_usd"] == 0).all() and (jobs["tags.stop_reason"] == "done").all()
    for role in ("clarifier", "ua", "rewriter", "search", "judge"):
        # identical calls of later jobs (same fake questions) are cache hits, so sum over the sweep
        assert jobs[f"metrics.tokens_in_{role}"].sum() > 0 and (jobs[f"metrics.calls_{role}"] > 0).all(), role
    # Only the clarifier varies: UA, rewriter, search and judge are the fixed ERNIE/WebDancer stack.
    assert set(jobs["params.ua.model.name"]) == {"ernie"} and set(jobs["params.search.model.name"]) == {"webdancer"}

    # The rerun in one process (the cts launcher; two joblib workers would cost their imports again)
    # reads what the first sweep's worker processes cached.
    sweep(tmp_path, llm_server, cache_dir, "second", "hydra/launcher=cts", "hydra.launcher.progress=false")
    assert len(llm_server.requests) == first  # the identical rerun is served from the caches
    runs = tracking.search_runs(f"sqlite:///{tmp_path}/mlflow.db")
    second = runs[(runs["tags.cts.kind"] == "job") & runs["tags.cts.sweep_dir"].str.endswith("second")]
    assert len(second) == 9 and (second["metrics.cache_hits"] == second["metrics.llm_calls"]).all()
    assert (second["metrics.cost_usd"] == 0).all()


@pytest.mark.slow
def test_offline_stack_with_the_webdancer_agent_archives_traces_and_replays(tmp_path, llm_server, cache_dir):
    """experiment=offline search=webdancer: the agent (on the scripted server) over the offline corpus."""
    llm_server.handler = protocol_reply
    common = (
        "experiment=offline",
        "search=webdancer",
        "limit=4",
        f"services.llm.api_base={llm_server.base_url}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={tmp_path}/cache",
        f"services.llm.cache.path={tmp_path}/llm_cache.sqlite",
    )
    shutil.copytree(cache_dir / "index", tmp_path / "cache" / "index", dirs_exist_ok=True)  # own tool cache
    run_py(*common, f"hydra.run.dir={tmp_path}/a", cwd=tmp_path)
    first = len(llm_server.requests)
    traces = [json.loads(x) for x in (tmp_path / "a" / "traces.jsonl").read_text().splitlines()]
    kinds = {e["type"] for t in traces for e in t.get("trace", ())}  # the instance line holds its stage times
    assert first > 0 and {"llm", "tool_call", "tool_result", "end"} <= kinds
    records = [json.loads(x) for x in (tmp_path / "a" / "records.jsonl").read_text().splitlines()]
    errors = [(r["id"], r["error"]) for r in records if r["error"]]
    assert not errors, errors
    assert all(
        r["orig"]["trace_summary"]["searches"] >= 1 and r["orig"]["answer_rule"] == "answer_tag" for r in records
    )

    run_py(*common, f"hydra.run.dir={tmp_path}/b", cwd=tmp_path)
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())["metrics"]
    new = [r.body for r in llm_server.requests[first:]]
    assert not new, (summary, new[:2])  # no LLM request on the warm rerun
    assert summary["tool_cache_misses"] == 0 and summary["tool_cache_hits"] > 0  # no tool request either
    assert summary["cache_hits"] == summary["llm_calls"]
