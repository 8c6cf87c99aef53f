"""The real offline sweep (batch and sequential), its report sections, and ``python -m cts.gating`` over it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cts import tracking
from tests.llm_server import ScriptedServer
from tests.prewarmed import run_script
from tests.runs import run_py

REPO = Path(__file__).resolve().parents[2]


def gate_cli(sweep: Path, *overrides: str) -> dict:
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    proc = run_script(
        ["-m", "cts.gating", str(sweep), *overrides],
        cwd=REPO,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "counters:" in proc.stdout
    name = next(o.split("=", 1)[1] for o in overrides if o.startswith("gate="))
    return json.loads((sweep / "gating" / f"{name}.json").read_text())


def gate_in_process(sweep: Path, capsys: pytest.CaptureFixture[str], *overrides: str) -> dict:
    """``gate_cli``'s command through its ``main`` in this process (one interpreter start-up less per gate)."""
    from cts.gating.cli import main

    capsys.readouterr()
    assert main([str(sweep), *overrides]) == 0
    assert "counters:" in capsys.readouterr().out
    name = next(o.split("=", 1)[1] for o in overrides if o.startswith("gate="))
    return json.loads((sweep / "gating" / f"{name}.json").read_text())


@pytest.mark.slow
def test_sequential_sweep_report_and_post_hoc_gates(tmp_path, cache_dir, llm_server: ScriptedServer, capsys):
    sweep, db = tmp_path / "sweep", tmp_path / "store" / "mlflow.db"
    run_py(
        "-m",
        "experiment=offline",
        "clarifier=rules_region",
        "k=1,2",
        "limit=40",
        "clarifier.mode=batch,sequential",
        "clarifier.stop_early=true",
        f"hydra.sweep.dir={sweep}",
        f"tracking.uri=sqlite:///{db}",
        f"paths.cache_dir={cache_dir}",
        "bootstrap.n_resamples=500",
        cwd=tmp_path,
    )
    report = sweep / "report"
    for name in ("batch_vs_sequential.csv", "gating.csv", "frontier.csv", "frontier.png", "score_vs_questions.png"):
        assert (report / name).is_file(), name
    runs = tracking.search_runs(f"sqlite:///{db}")
    rep = runs[runs["tags.cts.kind"] == "sweep_report"]
    assert len(rep) == 1 and any(c.startswith("metrics.gate_score_mean.") for c in rep.columns)

    # The offline gates in this process; the CLI itself runs for the LLM gate below.
    gates = ("always", "never", "oracle", "rules")
    results = {g: gate_in_process(sweep, capsys, f"gate={g}", "bootstrap.n_resamples=300") for g in gates}
    for res in results.values():
        assert res["counters"]["search_calls"] == 0 and res["counters"]["judge_calls"] == 0
        assert res["counters"]["other_llm_calls"] == 0 and res["counters"]["gate_llm_calls"] == 0
    score = {g: [r["score_mean"] for r in res["rows"]] for g, res in results.items()}
    for i in range(len(score["always"])):
        assert score["oracle"][i] >= max(score["always"][i], score["never"][i])
        assert score["never"][i] <= score["rules"][i] <= score["oracle"][i]

    llm_server.handler = lambda body: json.dumps(
        {"ask": "Tell me" in body["messages"][-1]["content"], "confidence": 0.7}
    )
    res = gate_cli(
        sweep,
        "gate=llm",
        f"services.llm.api_base={llm_server.base_url}",
        "services.llm.api_key=x",
        "services.llm.cache.mode=off",
        "bootstrap.n_resamples=300",
    )
    n_jobs = len(res["rows"])
    assert res["counters"]["gate_llm_calls"] == len(llm_server.requests) == 40 * n_jobs
    assert res["counters"]["search_calls"] == res["counters"]["judge_calls"] == 0
    assert all("Query:" in r.body["messages"][-1]["content"] for r in llm_server.requests)


@pytest.mark.slow
def test_python_m_cts_gating_counts_instances_not_repeats(offline_jobs: dict[int, Path], cache_dir: Path):
    from cts.gating.cli import compose_config, gate_jobs
    from tests.runs import OFFLINE_RESAMPLES

    cfg = compose_config(["gate=oracle", f"paths.cache_dir={cache_dir}", f"bootstrap.n_resamples={OFFLINE_RESAMPLES}"])
    (one,), _ = gate_jobs(offline_jobs[1], cfg)
    (three,), calls = gate_jobs(offline_jobs[3], cfg)  # 3 identical repeats of each of the 12 instances
    assert three["n"] == one["n"] == 12 and three == one
    assert calls["search_calls"] == calls["judge_calls"] == 0
