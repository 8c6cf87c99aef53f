"""A query-expansion stage between the rewriter and the search: one class, one declaration, one offline job."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Protocol

from cts.core.stages import Stage, registered
from tests.prewarmed import run_script
from tests.runs import OFFLINE_RESAMPLES, REPO
from tests.stage_contract import contract_problems


class QueryExpander(Protocol):
    """Sees the rewritten query only, returns the query to search."""

    async def expand(self, query: str) -> str: ...


class SuffixExpander:
    """An offline baseline: the query with a fixed term added (CJK queries too)."""

    def __init__(self, term: str = "overview") -> None:
        self.term = term

    async def expand(self, query: str) -> str:
        return f"{query} {self.term}"


EXPAND = Stage("expand", "expander", f"{__name__}.QueryExpander", "expand", ("query",), "query", batchable=False)

LAUNCH = """import runpy, sys
sys.path.insert(0, {repo!r})
from cts.core.stages import register
from tests.protocol.test_stage_expand import EXPAND
register(EXPAND)
runpy.run_path({run!r}, run_name="__main__")
"""


def test_the_stage_keeps_its_contract() -> None:
    with registered(EXPAND):
        assert contract_problems(EXPAND) == []


def test_an_offline_job_runs_through_the_stage(tmp_path: Path, cache_dir: Path) -> None:
    import subprocess

    launch = tmp_path / "launch.py"
    launch.write_text(LAUNCH.format(repo=str(REPO), run=str(REPO / "run.py")), encoding="utf-8")
    job = tmp_path / "job"
    overrides = ["experiment=offline", "k=1", "limit=3", f"hydra.run.dir={job}", f"paths.cache_dir={cache_dir}"]
    overrides += [f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"bootstrap.n_resamples={OFFLINE_RESAMPLES}"]
    overrides += [f"+expander._target_={__name__}.SuffixExpander", "+expander.term='概要'"]
    proc = run_script([str(launch), *overrides], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (job / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    clarified = [r for r in records if r["rewritten_query"] != r["orig"]["query"]]
    assert clarified and all(r["clarified"]["query"] == r["rewritten_query"] + " 概要" for r in clarified)
    spans = [s["stage"] for line in (job / "traces.jsonl").read_text().splitlines() for s in json.loads(line)["stages"]]
    assert "expand" in spans
    assert json.loads((job / "summary.json").read_text())["unscored"]["unscored_rate_expander_invalid_output"] == 0
