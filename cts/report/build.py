"""Build a sweep report (every table and plot) and log it to MLflow."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from cts.core.errors import CtsError
from cts.protocol.repeats import PASS_THRESHOLD
from cts.report.agreement import imported_report
from cts.report.beyond import extra_report
from cts.report.jobs import NO_MODE, Job, load_jobs
from cts.report.personas import persona_report
from cts.report.plots import plot_scores, plot_unknown_vs_region
from cts.report.ppi import PPI_METRICS, imported_ppi, with_ppi
from cts.report.repeats import design_report
from cts.report.rows import diagnostic_rows, score_rows
from cts.report.tables import Table, build_tables, markdown, write_table
from cts.stats.bootstrap import Resampling, shared_draws
from cts.stats.compare import PValueTest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportResult:
    """What :func:`build_sweep_report` produced (never raised: see ``errors``)."""

    source: str
    out_dir: Path | None
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    """Numbers of every table, by name."""
    files: tuple[Path, ...] = ()
    metrics: Mapping[str, float] = field(default_factory=dict)
    """Sweep-level metrics for MLflow (``<metric>.<system>.k<k>``)."""
    n_jobs: int = 0
    errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the report was built without error."""
        return not self.errors


@dataclass(frozen=True)
class ReportSettings:
    """How a sweep report computes its numbers.

    Attributes:
        bootstrap: Resamples, confidence level and seed of every interval.
        p_value: The test of Table 3's p-values: ``bootstrap`` (the CI's resamples) or ``permutation`` (sign-flip).
        pass_threshold: The restore_score_100 at or above which a repeat passes (the repeats table's pass^k).
    """

    bootstrap: Resampling = Resampling()
    p_value: PValueTest = "bootstrap"
    pass_threshold: float = PASS_THRESHOLD


DEFAULT_REPORT = ReportSettings()


def _metric_key(*parts: Any) -> str:
    return re.sub(r"[^\w\-. /]", "_", ".".join(str(p) for p in parts))


def sweep_metrics(scores: pd.DataFrame, diag: pd.DataFrame) -> dict[str, float]:
    """Flatten the main numbers into MLflow metric names (``score_mean.<system>.k<k>``).

    When the sweep has several modes, the mode ends the name (``score_mean.rules_scope.k1.sequential``).
    """
    several = len(set(scores["mode"]) - {NO_MODE}) > 1 if len(scores) else False

    def key(name: str, row: Mapping[str, Any]) -> str:
        mode = (row["mode"],) if several and row["mode"] != NO_MODE else ()
        return _metric_key(name, row["system"], f"k{row['k']}", *mode)

    out: dict[str, float] = {}
    for row in scores.to_dict("records"):
        for name, col in (
            ("score_mean", "mean"),
            ("delta_mean", "delta"),
            ("delta_ci_low", "delta_ci_low"),
            ("delta_ci_high", "delta_ci_high"),
            ("delta_p_holm", "p_holm"),
            *((c, c) for c in PPI_METRICS),
        ):
            if col in row:
                out[key(name, row)] = float(row[col])
    for row in diag.to_dict("records"):
        for name in ("ua_unknown_rate", "cq_region_rate", "region_only_unknown_rate", "all_unknown_rate"):
            out[key(name, row)] = float(row[name])
    return {k: v for k, v in out.items() if math.isfinite(v)}


def write_report(
    jobs: Sequence[Job], out_dir: Path, settings: ReportSettings = DEFAULT_REPORT, source: str = ""
) -> ReportResult:
    """Build every table and plot of ``jobs`` into ``out_dir`` (raises on failure)."""
    with shared_draws():  # one seed for every CI: each draw and distribution computed once
        return _write_report(jobs, out_dir, settings, source)


def _write_report(jobs: Sequence[Job], out_dir: Path, settings: ReportSettings, source: str) -> ReportResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    bootstrap = settings.bootstrap
    scores, diag = score_rows(jobs, bootstrap, settings.p_value), diagnostic_rows(jobs)
    scores = with_ppi(scores, imported_ppi(source, jobs, bootstrap.confidence))  # once people labelled a sample
    tables = build_tables(scores, diag, bootstrap.confidence)
    files = [p for t in tables for p in write_table(t, out_dir)]
    files.append(plot_scores(scores, out_dir / "score_vs_k.png"))
    if not diag.empty:
        files.append(plot_unknown_vs_region(diag, out_dir / "unknown_vs_region.png"))
    # batch vs sequential, gating, frontier
    more_tables, more_plots, more_metrics = extra_report(jobs, bootstrap, out_dir)
    more_tables += design_report(
        jobs, bootstrap, settings.pass_threshold
    )  # repeats, attribution arms, variance by stage (when jobs have them)
    more_tables += persona_report(jobs, bootstrap)  # simulated users of other kinds (ua/persona), when played
    more_tables += imported_report(source, jobs, bootstrap)  # judges vs people, once labels are imported
    tables += more_tables
    files += [p for t in more_tables for p in write_table(t, out_dir)] + more_plots
    files.append(write_index(tables, [p for p in files if p.suffix == ".png"], out_dir, source, len(jobs)))
    return ReportResult(
        source,
        out_dir,
        {t.name: t.data for t in tables},
        tuple(files),
        {**sweep_metrics(scores, diag), **more_metrics},
        len(jobs),
    )


def write_index(tables: Sequence[Table], plots: Sequence[Path], out_dir: Path, source: str, n_jobs: int) -> Path:
    """Write ``report.md``: every table and plot on one page."""
    head = (
        f"# Sweep report\n\nSource: `{source}` ({n_jobs} jobs). Files: CSV (numbers), "
        "Markdown and LaTeX (formatted) per table.\n"
    )
    parts = [head]
    parts += [f"## {t.caption}\n\n{markdown(t.display)}" for t in tables]
    parts += [f"![{p.stem}]({p.name})\n" for p in plots]
    path = out_dir / "report.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def default_out_dir(source: str | Path | Sequence[str | Path]) -> Path:
    """``<sweep dir>/report`` for a directory; ``outputs/reports/<experiment>`` otherwise."""
    if isinstance(source, (str, Path)) and Path(source).is_dir():
        return Path(source) / "report"
    name = source if isinstance(source, (str, Path)) else "jobs"
    return Path("outputs") / "reports" / re.sub(r"[^\w.-]", "_", str(name))


def build_sweep_report(
    source: str | Path | Sequence[str | Path],
    out_dir: Path | None = None,
    tracking_uri: str | None = None,
    settings: ReportSettings = DEFAULT_REPORT,
) -> ReportResult:
    """Build the paper's tables and plots for a sweep. Never raises (safe in Hydra callbacks).

    Args:
        source: A Hydra sweep dir, a list of job dirs, or an MLflow experiment name.
        out_dir: Where to write (default :func:`default_out_dir`).
        tracking_uri: MLflow tracking URI (needed for an experiment name).
        settings: The intervals' resampling, Table 3's test and the repeats' pass threshold.

    Returns:
        The result; ``result.errors`` is non-empty (and logged) when something failed.
    """
    name = str(source)
    try:
        jobs = load_jobs(source, tracking_uri)
        if not jobs:
            raise ValueError(f"no finished job found in {name}")
        out = Path(out_dir) if out_dir is not None else default_out_dir(source)
        result = write_report(jobs, out, settings, name)
        log.info("sweep report (%d jobs) written to %s", len(jobs), out)
        return result
    except CtsError:  # e.g. a broken tracking store: its own message and exit status
        raise
    except Exception as e:
        log.exception("sweep report for %s failed", name)
        return ReportResult(name, out_dir, errors=(f"{type(e).__name__}: {e}",))


def log_sweep_report(result: ReportResult, tracking_uri: str, experiment: str) -> str | None:
    """Log a built report as one MLflow run (tag ``cts.kind=sweep_report``). Never raises.

    Returns:
        The run id, or None when there was nothing to log or logging failed.
    """
    if not result.ok or result.out_dir is None:
        return None
    from cts import tracking

    try:
        metrics = {**result.metrics, "n_jobs": float(result.n_jobs)}
        return tracking.log_report_run(
            tracking_uri,
            experiment,
            f"report:{Path(result.source).name}",
            metrics,
            [result.out_dir],
            tags={"cts.sweep_dir": result.source},
        )
    except Exception:
        log.exception("logging the sweep report of %s failed", result.source)
        return None
