"""Load the jobs of a sweep: a Hydra multirun dir, job dirs, or an MLflow experiment."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cts._util import naming
from cts.compat.job_dirs import factors_from_run_name
from cts.core.records import Record, read_records
from cts.data.clusters import summary_clusters
from cts.protocol.job_files import RECORDS_FILE

log = logging.getLogger(__name__)

ORIG = "orig"
"""Label of the orig arm (search q directly) in every table."""
NO_MODE = "–"
"""The mode column of an orig row (the orig arm asks nothing)."""
SUMMARY_FILE = "summary.json"
MODE_KEY = "clarifier.mode"
"""The factor every table shows as its ``mode`` column (read from the records), never in a label."""
_REBIND = naming.CLARIFIER_MODEL
"""An override of this key names the system (:func:`cts._util.naming.system_name`)."""
_NOT_FACTORS = frozenset({"clarifier", "k"})


@dataclass(frozen=True)
class Job:
    """One job of a sweep: its identity and its records."""

    system: str
    """:func:`cts._util.naming.system_name`: the clarifier option (``rules_scope``, ``gpt``; ``none`` = orig),
    or the model option a swept override binds."""
    k: int
    records: tuple[Record, ...]
    factors: Mapping[str, str] = field(default_factory=dict)
    """The job's setting: config choices and swept overrides other than the clarifier's and k."""
    job_dir: str = ""
    run_id: str = ""
    label: str = ""
    """Display name: the system plus every factor but the mode that varies across the sweep."""
    variant: Mapping[str, str] = field(default_factory=dict)
    """Swept overrides of the clarifier's own settings (``clarifier.mode``, ``clarifier.stop_early``)."""
    setting: str = ""
    """The setting factors that vary across the sweep (``judge=strict``): what tells orig rows apart."""
    cluster_field: str | None = None
    """The dataset's ``cluster_field`` when the job's delta CI resampled clusters (from ``summary.json``)."""
    clusters: Mapping[str, str] = field(default_factory=dict)
    """Instance id -> cluster label (with ``cluster_field``)."""
    choices: Mapping[str, str] = field(default_factory=dict)
    """Every config group's option (``summary.json``'s ``choices``: ``ua/persona`` ...)."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """The job's metrics as its ``summary.json`` stores them (e.g. the UA's fidelity audit)."""

    @property
    def is_orig(self) -> bool:
        """Whether this job's clarified arm is the orig arm: no instance was asked a question.

        Read from the records, not from the clarifier's option name.
        """
        return bool(self.records) and all(
            not r.questions and (r.error is None or r.error.stage != "clarify") for r in self.records
        )

    @property
    def mode(self) -> str:
        """``batch`` or ``sequential`` as recorded (``mixed`` if the job holds both)."""
        modes = {r.mode for r in self.records}
        return modes.pop() if len(modes) == 1 else ("mixed" if modes else "batch")


def _overridden(summary: Mapping[str, Any]) -> dict[str, str]:
    """The swept factors of a job, from its stored overrides (:func:`cts._util.naming.factors`)."""
    overrides = summary.get("overrides")
    if not isinstance(overrides, list):
        return factors_from_run_name(str(summary.get("run_name") or ""))  # written before summaries kept overrides
    swept = summary.get("swept")
    return naming.factors([str(o) for o in overrides], None if swept is None else [str(k) for k in swept])


def _clarifier_only(key: str) -> bool:
    """Whether a factor changes the clarifier only (so it varies the system, not the setting)."""
    return key.startswith(("clarifier.", "model@clarifier."))


def _implied(key: str, choices: Mapping[str, str]) -> bool:
    """Whether a choice follows from another (``model@ua.model`` from ``ua``, ``search/provider`` from ``search``)."""
    parent = key.split("@", 1)[1].split(".", 1)[0] if "@" in key else key.split("/", 1)[0]
    return parent != key and parent in choices


def job_from_summary(summary: Mapping[str, Any], records: Sequence[Record], job_dir: str = "") -> Job:
    """Build a :class:`Job` from a ``summary.json`` mapping and the job's records."""
    choices = {str(g): str(v) for g, v in (summary.get("choices") or {}).items() if not str(g).startswith("hydra")}
    swept = _overridden(summary)
    system = naming.system_name(choices, swept)
    chosen = {g: v for g, v in choices.items() if not _implied(g, choices)}
    setting = {g: v for g, v in {**chosen, **swept}.items() if g not in _NOT_FACTORS and not _clarifier_only(g)}
    variant = {g: v for g, v in swept.items() if _clarifier_only(g) and g != _REBIND}
    k = int(summary.get("k") or (records[0].k if records else 0))
    cluster_field, clusters = summary_clusters(summary)
    return Job(
        system,
        k,
        tuple(records),
        setting,
        job_dir or str(summary.get("job_dir", "")),
        str(summary.get("run_id") or ""),
        variant=variant,
        cluster_field=cluster_field,
        clusters=clusters,
        choices=choices,
        metrics={str(k): float(v) for k, v in (summary.get("metrics") or {}).items() if isinstance(v, (int, float))},
    )


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
    return (
        bool(original) and Path(original).resolve() != job_dir.resolve() and (Path(original) / SUMMARY_FILE).is_file()
    )


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
            jobs[(job.system, job.k, job.mode, _items(job.variant), _items(job.factors))] = job
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


def _items(factors: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(factors.items()))


def _varying(maps: Sequence[Mapping[str, str]]) -> list[str]:
    """Keys whose value (or absence) is not the same in every mapping."""
    keys = sorted({key for m in maps for key in m})
    return [key for key in keys if len({m.get(key) for m in maps}) > 1]


def _joined(factors: Mapping[str, str], keys: Sequence[str]) -> str:
    return ",".join(f"{key}={factors.get(key)}" for key in keys)


def label_jobs(jobs: Sequence[Job]) -> list[Job]:
    """Name each job by its system plus the factors that vary across ``jobs`` (the mode is a column)."""
    setting_keys = _varying([j.factors for j in jobs])
    keys = sorted({*setting_keys, *(key for key in _varying([j.variant for j in jobs]) if key != MODE_KEY)})
    out = []
    for j in jobs:
        extra = _joined({**j.variant, **j.factors}, keys)
        label = ORIG if j.is_orig and not extra else (f"{j.system}[{extra}]" if extra else j.system)
        out.append(replace(j, label=label, setting=_joined(j.factors, setting_keys)))
    return sorted(out, key=lambda j: (j.k, j.label, j.mode))
