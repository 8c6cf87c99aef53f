"""Two sweeps started into one dir: each job runs once, and the process that finishes last ends the sweep.

A job dir is locked while a job runs in it (:func:`cts._util.interrupt.job_dir_lock`). A second
process of the same sweep (the same command started twice, or a resume while the first still runs)
leaves a job whose dir the other holds to that one (:func:`cts.compose.app.run`), and at its own
end, one process at a time (:func:`sweep_end`), it looks at the sweep's job dirs: while another
process still holds one, that process will end the sweep, so this one says so and writes nothing
(:func:`held_elsewhere`); the last process to finish writes the report and says the sweep's status.
Two that end at once never both write it: the second finds the report newer than every job's
summary (:func:`written_report`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from filelock import FileLock, Timeout

from cts._util.interrupt import LOCK_FILE

__all__ = ["SWEEP_LOCK_FILE", "held_elsewhere", "left_to_others", "sweep_end", "written_report"]

SWEEP_LOCK_FILE = ".cts.sweep.lock"
_SUMMARY, _REPORT = "summary.json", Path("report") / "report.md"


@contextlib.contextmanager
def sweep_end(sweep_dir: Path) -> Iterator[None]:
    """Hold the end of the sweep in ``sweep_dir``: one process at a time looks at its jobs and writes its report."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(sweep_dir / SWEEP_LOCK_FILE):
        yield


def held_elsewhere(sweep_dir: Path) -> list[Path]:
    """The sweep's job dirs that another process is running a job in (this process's jobs have all ended)."""
    held = []
    for lock_path in sorted(sweep_dir.rglob(LOCK_FILE)):
        lock = FileLock(lock_path, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            held.append(lock_path.parent)
        else:
            lock.release()
    return held


def written_report(sweep_dir: Path) -> Path | None:
    """The sweep's ``report.md`` when it is newer than every job's summary (another process wrote it), else None."""
    report = sweep_dir / _REPORT
    summaries = list(sweep_dir.rglob(_SUMMARY))
    if not report.is_file() or not summaries:
        return None
    written = report.stat().st_mtime_ns
    return report if all(s.stat().st_mtime_ns <= written for s in summaries) else None


def left_to_others(sweep_dir: Path, held: Sequence[Path]) -> str:
    """The line of a process that ends while another still runs some of the sweep's jobs."""
    names = ", ".join(p.name for p in held[:3]) + (", ..." if len(held) > 3 else "")
    return (
        f"cts: {len(held)} job(s) of this sweep are running in another process ({names}); the process that "
        f"finishes last writes the report and says the sweep's status (or, once it has ended: "
        f"python -m cts.report {sweep_dir})"
    )
