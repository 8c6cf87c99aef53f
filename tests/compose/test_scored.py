"""A run that measured too little exits 3 with one line (``min_scored``); a sweep's status is its worst job's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cts.compose.scored import EXIT_SCORED_TOO_LITTLE, check_job, check_sweep, job_scored, too_little
from cts.compose.validate import value_problems
from cts.core.errors import ScoredTooLittle


def _job(root: Path, name: str, unscored_rate: float | None, n: int = 4) -> Path:
    job_dir = root / name
    job_dir.mkdir(parents=True)
    summary = {"run_name": name, "metrics": {"n_instances": float(n)}}
    if unscored_rate is not None:
        summary["unscored"] = {"unscored_rate": unscored_rate, "unscored_rate_judge_invalid_output": unscored_rate}
    (job_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return job_dir


def test_a_job_that_measured_nothing_fails_by_default_and_says_so_in_one_line(tmp_path: Path) -> None:
    job_dir = _job(tmp_path, "clarifier=gpt,k=1", 1.0)
    with pytest.raises(ScoredTooLittle) as caught:
        check_job(job_dir, 0.0)
    assert caught.value.exit_code == EXIT_SCORED_TOO_LITTLE == 3
    assert caught.value.message.splitlines() == [
        "cts: job FAILED: it measured 0% of its 8 scores (min_scored=0: at least one score); exit status 3"
    ]
    check_job(job_dir, None)  # null: no check


@pytest.mark.parametrize(
    ("rate", "min_scored", "fails"),
    [(0.0, 0.0, False), (0.99, 0.0, False), (1.0, 0.0, True), (0.5, 0.5, False), (0.75, 0.5, True), (1.0, None, False)],
)
def test_the_threshold_is_a_share_of_the_scores_and_nothing_measured_always_fails(
    tmp_path: Path, rate: float, min_scored: float | None, fails: bool
) -> None:
    scored = job_scored(_job(tmp_path, "j", rate))
    assert scored is not None and too_little(scored, min_scored) is fails


def test_a_job_with_no_record_is_left_to_its_own_stop_line(tmp_path: Path) -> None:
    assert job_scored(_job(tmp_path, "j", float("nan"), n=0)) is None  # e.g. the spend limit stopped it first
    check_job(tmp_path / "j", 0.0)


def test_a_task_that_scores_nothing_by_design_is_not_checked(tmp_path: Path) -> None:
    check_job(_job(tmp_path, "gold", None), 0.0)
    check_job(tmp_path / "no summary", 0.0)


def test_a_sweep_fails_when_any_job_measured_too_little_naming_the_worst(tmp_path: Path) -> None:
    dirs = [_job(tmp_path, "k=1", 0.0), _job(tmp_path, "k=2", 1.0), _job(tmp_path, "k=3", 0.5)]
    check_sweep(dirs, None)
    check_sweep(dirs[:1], 0.0)
    with pytest.raises(ScoredTooLittle) as caught:
        check_sweep(dirs, 0.6)
    assert caught.value.message == (
        "cts: sweep FAILED: 2 of its 3 jobs measured too little (min_scored=0.6: at least 60%): "
        "k=2 0% of its 8 scores; k=3 50% of its 8 scores; exit status 3"
    )


@pytest.mark.parametrize("value", [-0.1, 1.5, "most"])
def test_a_threshold_outside_0_to_1_is_refused_before_the_run(value: object) -> None:
    (problem,) = value_problems(OmegaConf.create({"min_scored": value}))
    assert problem.startswith("min_scored: must be a number >= 0 and <= 1 or null")
