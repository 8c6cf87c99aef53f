"""``python run.py`` and ``python run.py -m`` go through the same launch steps, in order, on the offline demo."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runs import run_py

# Runs run.py as __main__ with every launch step (and each job's run) saying its name on stderr.
RECORDING = """
import runpy, sys
from dataclasses import replace
import cts.compose.app as app
from cts.compose.launch import steps

def said(name, act):
    def act_and_say(at):
        print(f"launch step: {name}", file=sys.stderr, flush=True)
        act(at)
    return act_and_say

steps.STEPS = tuple(replace(s, act=said(s.name, s.act)) if s.act else s for s in steps.STEPS)
job = app.run
def run(cfg):
    print("launch step: run", file=sys.stderr, flush=True)
    return job(cfg)
app.run = run
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _steps(stderr: str) -> list[str]:
    return [line.rpartition("launch step: ")[2] for line in stderr.splitlines() if "launch step: " in line]


@pytest.mark.slow
def test_a_run_and_a_multirun_go_through_the_same_steps(tmp_path: Path, cache_dir: Path) -> None:
    wrapper = tmp_path / "recording.py"
    wrapper.write_text(RECORDING, encoding="utf-8")
    common = (
        "experiment=offline",
        "limit=1",
        f"tracking.uri=sqlite:///{tmp_path}/m.db",
        f"paths.cache_dir={cache_dir}",
    )
    single = run_py(*common, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path, python=(str(wrapper),))
    multi = run_py("-m", *common, f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path, python=(str(wrapper),))
    order = ["check", "probe", "plan", "store", "run", "report"]
    assert _steps(single.stderr) == order
    assert _steps(multi.stderr) == order
    assert (tmp_path / "run" / "summary.json").is_file() and (tmp_path / "sweep" / "report" / "report.md").is_file()
