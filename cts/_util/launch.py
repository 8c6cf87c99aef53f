"""What a sweep's launching process tells its jobs: the swept keys and the sweep's resume command.

The launching process knows which overrides sweep (``k=1,2``) and the command line that
reran the whole sweep; a job does not (Hydra gives it its own, expanded overrides). The
record is kept in this process while the sweep runs (:func:`begin_sweep`), for the jobs
it runs itself, and written to ``<sweep dir>/sweep.json`` before the launch, for jobs that
run in other processes or on other nodes (joblib, Slurm) and read the sweep dir they share.
Nothing is passed through environment variables or module state that outlives the sweep.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

RECORD_FILE = "sweep.json"


@dataclass(frozen=True)
class SweepRecord:
    """One sweep, as its launching process saw it.

    Attributes:
        sweep_dir: The sweep's dir (absolute).
        swept: The keys of the command-line overrides that sweep (``clarifier``, ``k``).
        resume: The command that reruns the sweep into the same dir (finished instances skipped).
    """

    sweep_dir: str
    swept: tuple[str, ...]
    resume: str

    def write(self) -> Path:
        """Write ``<sweep dir>/sweep.json`` (for jobs in other processes); returns its path."""
        path = Path(self.sweep_dir) / RECORD_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"swept": list(self.swept), "resume": self.resume}
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
        return path


_ACTIVE: list[SweepRecord] = []  # the sweep this process launches now (at most one)


def begin_sweep(sweep_dir: str, swept: Sequence[str], resume: str) -> SweepRecord:
    """Record the sweep this process is about to launch (until :func:`end_sweep`)."""
    record = SweepRecord(os.path.abspath(sweep_dir), tuple(swept), resume)
    _ACTIVE[:] = [record]
    return record


def end_sweep() -> None:
    """The sweep has ended: its jobs are done."""
    _ACTIVE.clear()


def sweep_record(sweep_dir: str) -> SweepRecord | None:
    """The record of the sweep whose dir is ``sweep_dir``: this process's, else its ``sweep.json``, else None.

    An empty ``sweep_dir`` (a config whose job-name resolver predates the argument) means the
    sweep this process launches, if any.
    """
    if not sweep_dir:
        return _ACTIVE[0] if _ACTIVE else None
    where = os.path.abspath(sweep_dir)
    for record in _ACTIVE:
        if record.sweep_dir == where:
            return record
    try:
        data = json.loads((Path(where) / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return SweepRecord(where, tuple(str(k) for k in data.get("swept", ())), str(data.get("resume") or ""))


def swept_keys_of(sweep_dir: str) -> tuple[str, ...] | None:
    """The swept keys of the sweep in ``sweep_dir`` (None when no record says)."""
    record = sweep_record(sweep_dir)
    return None if record is None else record.swept
