"""Load the jobs of a sweep: a Hydra multirun dir, job dirs, or an MLflow experiment."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cts.job_files import RECORDS_FILE
from cts.records import Record, read_records

log = logging.getLogger(__name__)

ORIG = "orig"
"""Label of the orig arm (search q directly) in every table."""
SUMMARY_FILE = "summary.json"
_NOT_FACTORS = frozenset({"clarifier", "k"})


@dataclass(frozen=True)
class Job:
    """One job of a sweep: its identity and its records."""

    system: str
    """The clarifier option name (``none`` = orig)."""
    k: int
    records: tuple[Record, ...]
    factors: Mapping[str, str] = field(default_factory=dict)
    """Config choices and overrides other than clarifier and k (what else may vary)."""
    job_dir: str = ""
    run_id: str = ""
    label: str = ""
    """Display name: the system plus every factor that varies across the sweep."""

    @property
    def is_orig(self) -> bool:
        """Whether this job's clarified arm is the orig arm: no instance was asked a question.

        Read from the records, not from the clarifier's option name.
        """
        return bool(self.records) and all(
            not r.questions and (r.error is None or r.error.stage != "clarify") for r in self.records
        )


def _parse_overrides(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    last = None
    for item in items:
        if "=" in item:
            last, value = item.split("=", 1)
            out[last.lstrip("+~")] = value
        elif last is not None:  # a comma inside a value (override_dirname joins with ",")
            out[last] += f",{item}"
    return out


def _clarifier_only(key: str) -> bool:
    """Whether an override changes the clarifier only (so it names the system, not a setting)."""
    return key.startswith(("clarifier.", "model@clarifier"))


def system_name(option: str, factors: Mapping[str, str], records: Sequence[Record]) -> str:
    """The system's label: the clarifier option, or the model the records name when an override
    rebinds the clarifier's model (``clarifier=gpt model@clarifier.model=claude`` is ``claude``)."""
    if any(_clarifier_only(key) for key in factors):
        models = {r.models.get("clarifier") for r in records if r.models.get("clarifier")}
        if len(models) == 1:
            return str(models.pop()).rsplit("/", 1)[-1]
    return option


def job_from_summary(summary: Mapping[str, Any], records: Sequence[Record], job_dir: str = "") -> Job:
    """Build a :class:`Job` from a ``summary.json`` mapping and the job's records."""
    choices = {str(g): str(v) for g, v in (summary.get("choices") or {}).items() if not str(g).startswith("hydra")}
    overrides = summary.get("overrides")
    if not isinstance(overrides, list):
        overrides = str(summary.get("run_name") or "").split(",")
    factors = {**_parse_overrides(overrides), **choices}
    system = system_name(choices.get("clarifier") or factors.get("clarifier") or "unknown", factors, records)
    k = int(summary.get("k") or (records[0].k if records else 0))
    factors = {g: v for g, v in factors.items() if g not in _NOT_FACTORS and not _clarifier_only(g)}
    return Job(system, k, tuple(records), factors, job_dir or str(summary.get("job_dir", "")),
               str(summary.get("run_id") or ""))


def load_job_dir(path: str | Path) -> Job:
    """Load one job dir (``summary.json`` + ``records.jsonl``)."""
    p = Path(path)
    summary = json.loads((p / SUMMARY_FILE).read_text(encoding="utf-8"))
    return job_from_summary(summary, list(read_records(p / RECORDS_FILE)), str(p))


def job_dirs(sweep_dir: str | Path) -> list[Path]:
    """Job dirs under a sweep dir (any depth), or the dir itself when it is one job."""
    root = Path(sweep_dir)
    if (root / SUMMARY_FILE).is_file():
        return [root]
    return sorted(p.parent for p in root.rglob(SUMMARY_FILE) if not _is_artifact_copy(p.parent))


def _is_artifact_copy(job_dir: Path) -> bool:
    """Whether a dir is a copy (e.g. MLflow artifacts inside the sweep) of a job dir that exists."""
    try:
        original = json.loads((job_dir / SUMMARY_FILE).read_text(encoding="utf-8")).get("job_dir")
    except (OSError, ValueError):
        return False
    return bool(original) and Path(original).resolve() != job_dir.resolve() and (
        Path(original) / SUMMARY_FILE
    ).is_file()


def load_mlflow_jobs(experiment: str, tracking_uri: str) -> list[Job]:
    """Load the finished job runs of an MLflow experiment (artifacts downloaded).

    When several runs share the same system, k and factors (a rerun), the most
    recent one wins.
    """
    from cts import tracking

    runs = tracking.job_runs(tracking_uri, experiment, status="FINISHED")  # one per job dir
    if runs.empty:
        return []
    jobs: dict[tuple[Any, ...], Job] = {}
    with tempfile.TemporaryDirectory(prefix="cts-report-") as tmp:
        for _, run in runs.sort_values("start_time").iterrows():
            dst = Path(tmp) / str(run["run_id"])
            try:
                for name in (SUMMARY_FILE, RECORDS_FILE):
                    tracking.download_artifact(tracking_uri, run["run_id"], name, dst)
            except Exception as e:  # noqa: BLE001 - a run without artifacts is skipped, not fatal
                log.warning("run %s has no %s: %s", run["run_id"], name, e)
                continue
            job = load_job_dir(dst)
            jobs[(job.system, job.k, tuple(sorted(job.factors.items())))] = job
    return list(jobs.values())


def load_jobs(source: str | Path | Sequence[str | Path], tracking_uri: str | None = None) -> list[Job]:
    """Load a sweep's jobs and give each its display label.

    Args:
        source: A sweep dir, a job dir, a list of job dirs, or an MLflow experiment name.
        tracking_uri: Needed when ``source`` is an experiment name.

    Raises:
        FileNotFoundError: ``source`` is neither a directory nor (with a URI) an experiment.
    """
    if not isinstance(source, (str, Path)):  # a list (or ListConfig) of job or sweep dirs
        jobs = [load_job_dir(p) for d in source for p in job_dirs(d)]
    elif Path(source).is_dir() and job_dirs(source):
        jobs = [load_job_dir(p) for p in job_dirs(source)]
    elif tracking_uri:  # also when a directory of that name happens to exist (e.g. ``cts``)
        jobs = load_mlflow_jobs(str(source), tracking_uri)
    elif Path(source).is_dir():
        jobs = []
    else:
        raise FileNotFoundError(f"{source!r} is not a directory, and no tracking URI was given")
    return label_jobs(jobs)


def label_jobs(jobs: Sequence[Job]) -> list[Job]:
    """Name each job by its system plus the factors that vary across ``jobs``."""
    keys = sorted({key for j in jobs for key in j.factors})
    varying = [key for key in keys if len({j.factors.get(key) for j in jobs}) > 1]
    out = []
    for j in jobs:
        extra = ",".join(f"{key}={j.factors.get(key)}" for key in varying)
        label = ORIG if j.is_orig and not extra else (f"{j.system}[{extra}]" if extra else j.system)
        out.append(Job(j.system, j.k, j.records, j.factors, j.job_dir, j.run_id, label))
    return sorted(out, key=lambda j: (j.k, j.label))
