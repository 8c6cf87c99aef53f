"""Two sweeps started into one dir: each job runs once, both exit 0, and the one that finishes last writes the report."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cts._util.interrupt import LOCK_FILE
from cts.core.records import read_records
from cts.sweep._shared import held_elsewhere, left_to_others, written_report
from tests.runs import REPO, clone_env

HOLD = "import sys, time; from filelock import FileLock; lock = FileLock(sys.argv[1]); lock.acquire(); print('held', flush=True); time.sleep(600)"


def _holder(lock_path: Path) -> subprocess.Popen[str]:
    """Another process holding ``lock_path`` (as a job of another sweep holds its dir) until killed."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_job_dir_another_process_holds_is_found_and_a_free_one_is_not(tmp_path: Path) -> None:
    (tmp_path / "k=1").mkdir()
    (tmp_path / "k=1" / LOCK_FILE).touch()  # a lock file whose job ended
    holder = _holder(tmp_path / "k=2" / LOCK_FILE)
    try:
        assert held_elsewhere(tmp_path) == [tmp_path / "k=2"]
    finally:
        holder.kill()
        holder.wait()
    assert held_elsewhere(tmp_path) == []
    line = left_to_others(tmp_path, [tmp_path / "k=2"])
    assert "1 job(s) of this sweep are running in another process (k=2)" in line
    assert line.endswith(f"python -m cts.report {tmp_path})")


def test_a_report_newer_than_every_summary_was_written_by_the_other_process(tmp_path: Path) -> None:
    summary = tmp_path / "k=1" / "summary.json"
    summary.parent.mkdir()
    summary.write_text("{}")
    assert written_report(tmp_path) is None
    report = tmp_path / "report" / "report.md"
    report.parent.mkdir()
    report.write_text("# report")
    assert written_report(tmp_path) == report
    later = time.time() + 5
    os.utime(summary, (later, later))  # a job finished after it (a resume): the report is rebuilt
    assert written_report(tmp_path) is None


def _sweep(tmp_path: Path, cache_dir: Path, sweep_dir: Path) -> subprocess.Popen[str]:
    args = [
        "-m",
        "experiment=offline",
        "clarifier=rules_scope,none",
        "k=1,2",
        "limit=6",
        f"hydra.sweep.dir={sweep_dir}",
        f"paths.output_root={tmp_path / 'out'}",
        "hydra.launcher.progress=false",
    ]
    return subprocess.Popen(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=tmp_path,
        env=clone_env(cache_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
def test_a_sweep_leaves_a_job_another_process_runs_to_it_and_writes_no_report(tmp_path: Path, cache_dir: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    holder = _holder(sweep_dir / "clarifier=none,k=2" / LOCK_FILE)
    try:
        out, _ = _sweep(tmp_path, cache_dir, sweep_dir).communicate(timeout=600)
    finally:
        holder.kill()
        holder.wait()
    assert "exit status" not in out and "Error executing job" not in out, out[-3000:]
    assert f"running a job in {sweep_dir / 'clarifier=none,k=2'}: this sweep leaves the job to it" in out
    assert out.strip().splitlines()[-1] == left_to_others(sweep_dir, [sweep_dir / "clarifier=none,k=2"])
    assert not (sweep_dir / "report").exists() and not (sweep_dir / "clarifier=none,k=2" / "records.jsonl").exists()


@pytest.mark.slow
def test_two_sweeps_into_one_dir_run_each_job_once_and_the_last_one_writes_the_report(
    tmp_path: Path, cache_dir: Path
) -> None:
    sweep_dir = tmp_path / "sweep"
    first, second = _sweep(tmp_path, cache_dir, sweep_dir), _sweep(tmp_path, cache_dir, sweep_dir)
    outs = [p.communicate(timeout=600)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    wrote = [out for out in outs if "sweep report (4 jobs) written to" in out]
    assert wrote, outs  # by the last to finish (both, if the second started after the first had finished)
    for out in outs:
        if out not in wrote:  # the other said who writes it
            assert "the process that finishes last writes the report" in out or "written by another process" in out
    assert "(4 jobs)" in (sweep_dir / "report" / "report.md").read_text(encoding="utf-8")
    for job in sweep_dir.glob("clarifier=*"):
        ids = [(r.id, r.repeat) for r in read_records(job / "records.jsonl")]
        assert len(ids) == len(set(ids)) == 6, job
