"""The sweep report's time, measured before the main run: the report built on a replica of the slice at the sweep's size.

A report's cost grows with its jobs and their records (tables, intervals, plots, the gating
evaluation): a slice of five instances says little of a sweep of a hundred. The planner copies
each job's ``summary.json`` of the slice into a temporary sweep dir and repeats its records up to
the main run's size (the ids made unique), builds the report there with the sweep's bootstrap
settings, and times it. Nothing is logged to MLflow; the replica is removed.

The report imports its heavier modules when used (the plots' matplotlib, scipy.stats). The main
run's report, built later in the same process, finds them loaded; so a one-record replica's
report is built first, untimed, and the timed build measures the report, not those imports
(about 0.7 s warm and several seconds from a cold disk, added to the forecast for nothing).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from cts.compose.schema import Bootstrap
from cts.protocol.job_files import RECORDS_FILE

__all__ = ["time_report"]

log = logging.getLogger(__name__)
SUMMARY_FILE = "summary.json"


def time_report(source: Path, sizes: Mapping[str, int], bootstrap: Mapping[str, float], seed: int) -> float | None:
    """Seconds the report of a sweep of ``sizes`` (job -> records) takes, built on a replica of ``source``'s jobs.

    Returns:
        The seconds, or None when the slice has no finished job to replicate or the report fails.
    """
    from cts.report.build import ReportResult, ReportSettings, build_sweep_report
    from cts.stats.bootstrap import Resampling

    resampling = Resampling(
        int(bootstrap.get("n_resamples", Bootstrap().n_resamples)),
        float(bootstrap.get("confidence", Bootstrap().confidence)),
        seed,
    )

    def build(root: Path) -> ReportResult:
        return build_sweep_report(str(root), settings=ReportSettings(resampling))

    with tempfile.TemporaryDirectory(prefix="cts-plan-report-") as tmp:
        root, warm = Path(tmp) / "sweep", Path(tmp) / "warm"
        if not _replicate(source, root, sizes):
            return None
        _replicate(source, warm, dict.fromkeys(sizes, 1))
        build(warm)  # loads what the report imports when used; the main run's report finds it loaded
        started = time.monotonic()
        result = build(root)
        took = time.monotonic() - started
        shutil.rmtree(root, ignore_errors=True)
    if not result.ok:
        log.warning("plan: the report of the slice's replica failed (%s): its time is not forecast", result.errors)
        return None
    return took


def _replicate(source: Path, root: Path, sizes: Mapping[str, int]) -> bool:
    """Write each job's summary and its records repeated to ``sizes[job]`` under ``root``; whether any job was."""
    made = False
    for job, n in sizes.items():
        summary_path = source / job / SUMMARY_FILE
        records = _records(source / job / RECORDS_FILE)
        if not summary_path.is_file() or not records or n <= 0:
            continue
        target = root / job
        target.mkdir(parents=True)
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        summary["job_dir"] = str(target)  # a copy that names its original is skipped as an artifact copy
        (target / SUMMARY_FILE).write_text(json.dumps(summary), encoding="utf-8")
        with (target / RECORDS_FILE).open("w", encoding="utf-8") as f:
            for line in _repeated(records, n):
                f.write(line + "\n")
        made = True
    return made


def _records(path: Path) -> list[dict[str, object]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _repeated(records: Sequence[dict[str, object]], n: int) -> list[str]:
    """``n`` records cycling through ``records``, each copy's id made unique (``<id>~<copy>``)."""
    out = []
    for i in range(n):
        record = dict(records[i % len(records)])
        copy = i // len(records)
        if copy:
            record["id"] = f"{record.get('id')}~{copy}"
        out.append(json.dumps(record, ensure_ascii=False))
    return out
