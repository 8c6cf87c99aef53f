"""Import the released outputs as cts job dirs: records, ``summary.json`` and an MLflow run each, no LLM call.

Each ``results/candidates/*`` and ``results/clarify_only/*`` file of one system and k (from the
file's name, :func:`cts.release.outputs.system_and_k`) becomes one job dir
``<out>/clarifier=<system>,k=<k>``: a record per instance with the questions, the UA's answers,
the rewrite, and the candidate answer as the clarified arm (its score when the file has one).
An orig file (``orig__...``) gives every record its orig arm. The sweep report
(written to ``<out>/report/``, as a multirun's) then has the UA diagnostics (Tables 4, 5, 7, 8, 10),
computed from the records.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cts import tracking
from cts.compose.schema import Bootstrap, Config, default_of
from cts.core.records import ArmResult, Record
from cts.protocol.job_files import RECORDS_FILE
from cts.protocol.metrics import summarize
from cts.release.outputs import NAME_PATTERN, Kind, Output, OutputLayoutError, OutputScan, scan_outputs, system_and_k
from cts.report.build import ReportResult, ReportSettings, build_sweep_report
from cts.stats.bootstrap import Resampling

log = logging.getLogger(__name__)

KIND_DIRS: Mapping[Kind, str] = {"candidates": "results/candidates", "clarify_only": "results/clarify_only"}
"""Where each kind of output file sits in the release dir (project page)."""
SUMMARY_FILE = "summary.json"


class ImportRefused(ValueError):
    """Some output file cannot be imported; ``problems`` holds one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class ImportedJob:
    """One job dir written by the import."""

    system: str
    k: int
    job_dir: Path
    n_records: int
    run_id: str
    metrics: Mapping[str, float]


def default_root() -> Path:
    """Where outputs go by default: ``$PROJECT_ROOT``, else the checkout holding cts (as ``run.py`` does), else here."""
    if env := os.environ.get("PROJECT_ROOT"):
        return Path(env)
    checkout = Path(__file__).resolve().parents[2]
    return checkout if (checkout / "run.py").is_file() else Path.cwd()


def default_tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI``, else the default store of ``run.py``'s jobs (``outputs/mlflow.db``)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{default_root() / 'outputs' / 'mlflow.db'}"


def output_files(release: Path, pattern: str = NAME_PATTERN) -> dict[tuple[str, int], dict[Kind, Path]]:
    """The release's output files by ``(system, k)``, each kind's file.

    Raises:
        ImportRefused: A name says no system and k, or two files of one kind say the same.
    """
    found: dict[tuple[str, int], dict[Kind, Path]] = {}
    problems = []
    for kind, sub in KIND_DIRS.items():
        for path in sorted((release / sub).glob("*.jsonl")):
            try:
                key = system_and_k(path, pattern)
            except OutputLayoutError as e:
                problems.append(str(e))
                continue
            if kind in found.setdefault(key, {}):
                problems.append(f"{path}: a second {kind} file of {key[0]} at k={key[1]} (first: {found[key][kind]})")
            found[key][kind] = path
    if problems:
        raise ImportRefused(problems)
    return found


def _arm(row: Output | None, query: str | None) -> ArmResult | None:
    if row is None or row.answer is None:
        return None
    return ArmResult(query=row.query or query or "", answer=row.answer, score=row.score)


def job_records(system: str, k: int, scans: Mapping[Kind, OutputScan], orig: OutputScan | None = None) -> list[Record]:
    """One record per instance of the system's files, in the order they first appear."""
    by_kind = {kind: {r.id: r for r in scan.rows} for kind, scan in scans.items()}
    cands, clar = by_kind.get("candidates", {}), by_kind.get("clarify_only", {})
    origs = {r.id: r for r in orig.rows} if orig else {}
    ids = list(dict.fromkeys([*clar, *cands]))
    records = []
    for i in ids:
        c = clar.get(i)
        rewrite = (c.query if c else None) or (cands[i].query if i in cands else None)
        records.append(
            Record(
                id=i,
                k=k,
                questions=c.questions if c else (),
                answers=c.answers if c else (),
                rewritten_query=rewrite,
                clarified=_arm(cands.get(i), rewrite),
                orig=_arm(origs.get(i), None),
                models={"clarifier": system},
            )
        )
    return records


def _scan_all(
    files: Mapping[tuple[str, int], Mapping[Kind, Path]], fields: Mapping[str, str] | None
) -> dict[tuple[str, int], dict[Kind, OutputScan]]:
    scans: dict[tuple[str, int], dict[Kind, OutputScan]] = {}
    problems: list[str] = []
    for key, kinds in files.items():
        for kind, path in kinds.items():
            try:
                scan = scan_outputs(path, kind, fields)
            except OutputLayoutError as e:
                problems.append(str(e))
                continue
            problems += scan.problems
            scans.setdefault(key, {})[kind] = scan
    if problems:
        raise ImportRefused(problems)
    return scans


def _summary(
    system: str,
    k: int,
    job_dir: Path,
    metrics: Mapping[str, float],
    run_id: str,
    uri: str,
    experiment: str,
    release: Path,
) -> dict[str, Any]:
    return {
        "metrics": {m: (v if math.isfinite(v) else None) for m, v in metrics.items()},
        "choices": {"clarifier": system, "dataset": "hard518", "task": "release_import"},
        "k": k,
        "stop_reason": "completed",
        "run_name": f"clarifier={system},k={k}",
        "overrides": [f"clarifier={system}", f"k={k}"],
        "swept": ["clarifier", "k"],
        "job_dir": str(job_dir),
        "sweep_dir": str(job_dir.parent),
        "run_id": run_id,
        "experiment": experiment,
        "tracking_uri": uri,
        "source": str(release),
    }


@dataclass(frozen=True)
class Store:
    """The MLflow store the imported runs go to: its URI and experiment (``tracking.uri``, ``tracking.experiment``)."""

    uri: str
    experiment: str = default_of(Config, "tracking.experiment")


def write_job(
    release: Path, system: str, k: int, records: Sequence[Record], out_dir: Path, store: Store
) -> ImportedJob:
    """Write one job dir (records, summary) and log it as an MLflow run (tag ``cts.source=release``)."""
    uri, experiment = store.uri, store.experiment
    job_dir = out_dir / f"clarifier={system},k={k}"
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / RECORDS_FILE).write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    metrics = summarize(records, k=k, resampling=Resampling(1000))
    tags = {
        "cts.kind": "job",
        "cts.source": "release",
        "cts.system": system,
        "cts.k": str(k),
        "cts.job_dir": str(job_dir),
        "cts.sweep_dir": str(out_dir),
    }
    params = {"release": str(release), "clarifier": system, "k": str(k)}
    with tracking.open_mlflow_run(
        tracking.Experiment(uri, experiment), f"release:{system}-k{k}", params, tags, job_dir=job_dir
    ) as run_id:
        summary = _summary(system, k, job_dir, metrics, run_id, uri, experiment, release)
        (job_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
        tracking.log_metrics(metrics)
        tracking.log_artifacts([job_dir / RECORDS_FILE, job_dir / SUMMARY_FILE])
    return ImportedJob(system, k, job_dir, len(records), run_id, metrics)


def import_release(
    release: str | Path,
    out_dir: str | Path | None = None,
    tracking_uri: str | None = None,
    *,
    experiment: str = default_of(Config, "tracking.experiment"),
    pattern: str = NAME_PATTERN,
    fields: Mapping[str, str] | None = None,
) -> list[ImportedJob]:
    """Turn the release's output files into cts job dirs and MLflow runs (see the module docstring).

    Args:
        release: The unzipped ``release/`` dir.
        out_dir: Where the job dirs go (default ``outputs/release/<release dir name>``).
        tracking_uri: The MLflow store (default: :func:`default_tracking_uri`).
        experiment: The MLflow experiment.
        pattern: How a file's name says its system and k (:data:`cts.release.outputs.NAME_PATTERN`).
        fields: The files' keys by mapping key, where the defaults do not fit.

    Raises:
        ImportRefused: A bad file: one line each (nothing is written then).
        FileNotFoundError: ``release`` is not a dir.
    """
    root = Path(release)
    if not root.is_dir():
        raise FileNotFoundError(f"{release}: no such dir; unzip the release and name its release/ dir")
    files = output_files(root, pattern)
    if not files:
        raise ImportRefused([f"{root}: no *.jsonl under {' or '.join(KIND_DIRS.values())}"])
    scans = _scan_all(files, fields)
    orig = scans.pop(("orig", 0), {}).get("candidates")
    if not scans:
        raise ImportRefused([f"{root}: only an orig file; nothing asked a question to import"])
    out = Path(out_dir) if out_dir is not None else default_root() / "outputs" / "release" / root.resolve().name
    uri = tracking_uri or default_tracking_uri()
    jobs = []
    for (system, k), kinds in sorted(scans.items()):
        jobs.append(write_job(root, system, k, job_records(system, k, kinds, orig), out, Store(uri, experiment)))
        log.info("imported %s at k=%d: %d records", system, k, jobs[-1].n_records)
    return jobs


def report_imported(out_dir: Path, n_resamples: int = Bootstrap().n_resamples) -> ReportResult:
    """The sweep report of the imported job dirs, into ``<out_dir>/report`` (never raises: see ``errors``)."""
    return build_sweep_report(out_dir, out_dir / "report", settings=ReportSettings(Resampling(n_resamples)))
