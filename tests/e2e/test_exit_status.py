"""Exit statuses a script or a Slurm array can read: a run that measured no score exits 3, not 0 (``min_scored``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.prewarmed import run_script
from tests.runs import REPO, clone_env

PROSE = "Well, that is a thoughtful question, and I would rather discuss it at length in prose."


def _run(tmp_path: Path, cache_dir: Path, base_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    common = [
        "experiment=offline",
        "clarifier=gpt",
        "judge=gpt",  # every LLM reply is prose: the clarified arm and the orig arm are both unscored
        "limit=2",
        f"services.llm.api_base={base_url}",
        "services.llm.cache.mode=off",
        "services.llm.max_reasks=0",
        f"paths.output_root={tmp_path / 'out'}",
        "hydra.launcher.progress=false",
        "judge_anchors.check=false",  # a scripted judge: the anchor check (docs/judges.md) would refuse it before the run
    ]
    return run_script(
        [str(REPO / "run.py"), *args, *common],
        cwd=tmp_path,
        env=clone_env(cache_dir),
        timeout=600,
    )


@pytest.mark.slow
def test_a_run_and_a_sweep_whose_every_reply_is_unparseable_exit_3_with_one_line(
    tmp_path: Path, llm_server, cache_dir: Path
) -> None:
    llm_server.default = PROSE
    single = _run(tmp_path, cache_dir, llm_server.base_url)
    assert single.returncode == 3, single.stderr[-3000:]
    assert single.stderr.strip().splitlines()[-1] == (
        "cts: job FAILED: it measured 0% of its 4 scores (min_scored=0: at least one score); exit status 3"
    )
    assert "job dir:" in single.stdout  # the closing lines still say where the records are

    sweep_dir = tmp_path / "sweep"
    sweep = _run(tmp_path, cache_dir, llm_server.base_url, "-m", "k=1,2", f"hydra.sweep.dir={sweep_dir}")
    assert sweep.returncode == 3, sweep.stderr[-3000:]
    assert sweep.stderr.strip().splitlines()[-1] == (
        "cts: sweep FAILED: 2 of its 2 jobs measured too little (min_scored=0: at least one score): "
        "k=1 0% of its 4 scores; k=2 0% of its 4 scores; exit status 3"
    )
    assert (sweep_dir / "report" / "report.md").is_file()  # the report is written all the same

    off = _run(tmp_path, cache_dir, llm_server.base_url, "min_scored=null")
    assert off.returncode == 0, off.stderr[-3000:]
