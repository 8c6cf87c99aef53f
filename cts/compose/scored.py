"""A run that scored too little ends with exit status 3, not 0: ``min_scored``, the share of scores a job must measure.

A job whose every reply was unparseable ran, wrote its records and its summary, and measured
nothing. A script or a Slurm array that reads exit status 0 as success would publish it. After a
single run (and after a multirun, over every job dir of its sweep) each job's measured share of
scores (clarified and orig arms, ``1 - unscored_rate`` in its ``summary.json``) is compared with
``min_scored``: a job that measured none, or less than ``min_scored``, ends the command with one line
and :data:`EXIT_SCORED_TOO_LITTLE`; a sweep's status is its worst job's. ``min_scored=null`` turns the
check off. A task that scores nothing by design (the gold build) has no ``unscored`` entry, and a job with no
record (the spend limit stopped it first) no arm: neither is checked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cts.core.errors import ScoredTooLittle

__all__ = ["EXIT_SCORED_TOO_LITTLE", "JobScored", "check_job", "check_sweep", "job_scored", "too_little"]

EXIT_SCORED_TOO_LITTLE = ScoredTooLittle.exit_code
"""The exit status of a run that ran but scored less than ``min_scored`` (1 is an error, 130/143 a signal)."""


@dataclass(frozen=True)
class JobScored:
    """What one job measured: its name (the swept factors, or its dir), the share of its scores and how many it had."""

    name: str
    share: float
    n_scores: int


def job_scored(job_dir: Path) -> JobScored | None:
    """The measured share of the job in ``job_dir`` (None: no summary, or a task that scores nothing)."""
    try:
        summary = json.loads((job_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    unscored = summary.get("unscored") if isinstance(summary, dict) else None
    if not isinstance(unscored, dict) or "unscored_rate" not in unscored:
        return None
    rate = unscored["unscored_rate"]
    if rate is None or not math.isfinite(rate):
        return None  # no arm at all: a job the spend limit stopped before any instance says so itself
    n = int(2 * float((summary.get("metrics") or {}).get("n_instances") or 0))
    return JobScored(str(summary.get("run_name") or job_dir.name), max(1.0 - float(rate), 0.0), n)


def too_little(scored: JobScored, min_scored: float | None) -> bool:
    """Whether a job measured none of its scores, or a share below ``min_scored`` (None: never)."""
    return min_scored is not None and (scored.share <= 0.0 or scored.share < min_scored)


def _wanted(min_scored: float) -> str:
    return f"min_scored={min_scored:g}: " + ("at least one score" if min_scored <= 0 else f"at least {min_scored:.0%}")


def _measured(scored: JobScored) -> str:
    return f"{scored.share:.0%} of its {scored.n_scores} scores"


def check_job(job_dir: Path, min_scored: float | None) -> None:
    """Refuse (exit 3) a single run that measured too little, with one line.

    Raises:
        ScoredTooLittle: The job measured no score, or a share below ``min_scored``.
    """
    scored = job_scored(job_dir)
    if scored is not None and too_little(scored, min_scored):
        assert min_scored is not None
        raise ScoredTooLittle(
            f"cts: job FAILED: it measured {_measured(scored)} ({_wanted(min_scored)}); "
            f"exit status {EXIT_SCORED_TOO_LITTLE}"
        )


def check_sweep(job_dirs: Sequence[Path], min_scored: float | None) -> None:
    """Refuse (exit 3) a sweep any of whose jobs measured too little: its status is its worst job's.

    Raises:
        ScoredTooLittle: One line naming how many jobs and the worst ones.
    """
    found = [s for d in job_dirs if (s := job_scored(d)) is not None]
    low = sorted((s for s in found if too_little(s, min_scored)), key=lambda s: (s.share, s.name))
    if not low:
        return
    assert min_scored is not None
    shown = "; ".join(f"{s.name} {_measured(s)}" for s in low[:3]) + ("; ..." if len(low) > 3 else "")
    raise ScoredTooLittle(
        f"cts: sweep FAILED: {len(low)} of its {len(found)} jobs measured too little ({_wanted(min_scored)}): "
        f"{shown}; exit status {EXIT_SCORED_TOO_LITTLE}"
    )
