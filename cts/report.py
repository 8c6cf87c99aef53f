"""Paper-style sweep reports: tables (Markdown, CSV, LaTeX) and plots from a sweep's jobs.

A sweep is read from a Hydra multirun dir (one subdir per job with
``summary.json`` + ``records.jsonl``) or from an MLflow experiment (job runs
tagged ``cts.kind=job``, artifacts downloaded). Every number is recomputed
from the records, so a report never depends on which metrics a job logged:

* Tables 2/6  ``scores``: mean (delta vs orig), p50, p90 per system and k;
  the orig row pools the orig arms of the jobs at that k.
* Table 3     ``delta_ci``: paired bootstrap CI of the delta (:func:`cts.stats.paired_bootstrap_ci`).
* Table 4     ``ua_diagnostics``: ua_unknown_rate, cq_region_rate.
* Table 5     ``region_only``: #region-only questions, region-only unknown rate.
* Table 7     ``all_unknown``: all_unknown rate and known_cnt distribution.
* Table 8     ``region_only_range``: range of turn-level region-only unknown rates.
* Table 10    ``turn_region_only``: region-only count and unknown rate per turn.
* extra       ``qtype_unknown``: question-type shares and unknown rate per type.

Plots: ``score_vs_k.png`` (mean score and delta vs k per clarifier, 95% CI bars)
and ``unknown_vs_region.png`` (UA unknown rate vs region-question rate).

Command line::

    python -m cts.report outputs/multirun/2025-01-01_12-00-00
    python -m cts.report cts --tracking-uri sqlite:///outputs/mlflow.db --out outputs/reports/cts
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cts.diagnostics import diagnostics
from cts.qtypes import QTYPES
from cts.records import Record, read_records
from cts.stats import mean_ci, paired_bootstrap_ci

log = logging.getLogger(__name__)

ORIG = "orig"
RECORDS_FILE = "records.jsonl"
SUMMARY_FILE = "summary.json"
NAN = float("nan")
_NOT_FACTORS = frozenset({"clarifier", "k"})


# ----------------------------------------------------------------------------- jobs


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
        """Whether this job's system arm is the orig arm: no instance was asked a question.

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


def job_from_summary(summary: Mapping[str, Any], records: Sequence[Record], job_dir: str = "") -> Job:
    """Build a :class:`Job` from a ``summary.json`` mapping and the job's records."""
    choices = {str(g): str(v) for g, v in (summary.get("choices") or {}).items() if not str(g).startswith("hydra")}
    overrides = summary.get("overrides")
    if not isinstance(overrides, list):
        overrides = str(summary.get("run_name") or "").split(",")
    factors = {**_parse_overrides(overrides), **choices}
    system = choices.get("clarifier") or factors.get("clarifier") or "unknown"
    k = int(summary.get("k") or (records[0].k if records else 0))
    factors = {g: v for g, v in factors.items() if g not in _NOT_FACTORS}
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

    runs = tracking.search_runs(tracking_uri, experiment)
    if runs.empty or "tags.cts.kind" not in runs:
        return []
    runs = runs[(runs["tags.cts.kind"] == "job") & (runs["status"] == "FINISHED")]
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


# ----------------------------------------------------------------------------- numbers


@dataclass(frozen=True)
class Stats:
    """Bootstrap settings of a report."""

    n_resamples: int = 10_000
    confidence: float = 0.95
    seed: int = 0


def _finite(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def _dist(scores: Sequence[float]) -> dict[str, float]:
    a = np.asarray(scores, dtype=float)
    if a.size == 0:
        return {"n": 0.0, "mean": NAN, "p50": NAN, "p90": NAN}
    return {"n": float(a.size), "mean": float(a.mean()), "p50": float(np.median(a)),
            "p90": float(np.percentile(a, 90))}


def orig_scores(jobs: Sequence[Job]) -> dict[str, float]:
    """Per-instance orig score pooled over ``jobs`` (mean when jobs disagree)."""
    pooled: dict[str, list[float]] = {}
    for j in jobs:
        for r in j.records:
            if r.orig_score is not None:
                pooled.setdefault(r.id, []).append(r.orig_score)
    return {i: float(np.mean(v)) for i, v in pooled.items()}


def _settings(jobs: Sequence[Job]) -> list[tuple[int, str, list[Job]]]:
    """Jobs grouped by k and by every factor except the clarifier, with a label for the group.

    The label names the factors that vary across groups (empty when a sweep varies only
    the clarifier and k, as the paper's tables do).
    """
    groups: dict[tuple[int, tuple[tuple[str, str], ...]], list[Job]] = {}
    for j in jobs:
        groups.setdefault((j.k, tuple(sorted(j.factors.items()))), []).append(j)
    keys = sorted({key for _, f in groups for key, _ in f})
    varying = [key for key in keys if len({dict(f).get(key) for _, f in groups}) > 1]
    return [(k, ",".join(f"{key}={dict(f).get(key)}" for key in varying), js)
            for (k, f), js in sorted(groups.items(), key=lambda g: (g[0][0], str(g[0][1])))]


def paired(job: Job) -> tuple[list[float], list[float]]:
    """System and orig scores of the instances where both arms are scored."""
    pairs = [(r.score, r.orig_score) for r in job.records if r.score is not None and r.orig_score is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]  # type: ignore[misc]


def score_rows(jobs: Sequence[Job], stats: Stats) -> pd.DataFrame:
    """Tables 2/3/6 numbers: one orig row per k, then one row per system job."""
    rows = []
    for k, setting, at_k in _settings(jobs):
        origs = orig_scores(at_k)  # pooled only over jobs of one setting (search, judge, dataset ...)
        _, low, high = mean_ci(list(origs.values()), **vars(stats))
        rows.append({"k": k, "system": f"{ORIG}[{setting}]" if setting else ORIG, **_dist(list(origs.values())),
                     "mean_ci_low": low, "mean_ci_high": high, "n_paired": NAN, "delta": NAN,
                     "delta_ci_low": NAN, "delta_ci_high": NAN})
        for j in at_k:
            if j.is_orig:
                continue
            scores = _finite(r.score for r in j.records)
            _, low, high = mean_ci(scores, **vars(stats))
            sys_s, orig_s = paired(j)
            delta, d_low, d_high = paired_bootstrap_ci(sys_s, orig_s, **vars(stats))
            rows.append({"k": k, "system": j.label, **_dist(scores), "mean_ci_low": low,
                         "mean_ci_high": high, "n_paired": float(len(sys_s)), "delta": delta,
                         "delta_ci_low": d_low, "delta_ci_high": d_high})
    return pd.DataFrame(rows)


def diagnostic_rows(jobs: Sequence[Job]) -> pd.DataFrame:
    """Per system job: interaction metrics (unknown rates, known counts) and diagnostics."""
    from cts.metrics import interaction_metrics

    rows = [
        {"k": j.k, "system": j.label, **interaction_metrics(list(j.records), j.k), **diagnostics(j.records)}
        for j in jobs
        if not j.is_orig
    ]
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Table:
    """One report table: numbers for CSV, formatted cells for Markdown and LaTeX."""

    name: str
    caption: str
    data: pd.DataFrame
    display: pd.DataFrame


def _num(v: Any, digits: int = 3) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def _signed(v: float) -> str:
    return "–" if not math.isfinite(v) else f"{v:+.3f}"


def _count(v: float) -> str:
    return "–" if not math.isfinite(v) else f"{int(v)}"


def scores_table(scores: pd.DataFrame) -> Table:
    """Tables 2/6: mean (delta vs orig), p50, p90 per system and k."""
    data = scores[["k", "system", "n", "mean", "delta", "p50", "p90"]]
    display = pd.DataFrame({
        "k": data["k"], "System": data["system"], "n": data["n"].map(_count),
        "mean (Δ)": [_num(m) if s == ORIG else f"{_num(m)} ({_signed(d)})"
                     for s, m, d in zip(data["system"], data["mean"], data["delta"])],
        "p50": data["p50"].map(_num), "p90": data["p90"].map(_num),
    })
    caption = "Tables 2/6. restore_score_100 per system and budget k; Δ is the paired mean difference vs. orig."
    return Table("scores", caption, data.reset_index(drop=True), display.reset_index(drop=True))


def delta_ci_table(scores: pd.DataFrame, confidence: float) -> Table:
    """Table 3: mean delta vs orig with its paired bootstrap CI."""
    data = scores[scores["system"] != ORIG][["k", "system", "n_paired", "delta", "delta_ci_low", "delta_ci_high"]]
    pct = f"{confidence:.0%}"
    display = pd.DataFrame({
        "k": data["k"], "System": data["system"], "n": data["n_paired"].map(_count),
        "mean Δ vs. orig": data["delta"].map(_signed),
        f"{pct} CI": [f"[{_num(lo)}, {_num(hi)}]" for lo, hi in zip(data["delta_ci_low"], data["delta_ci_high"])],
    })
    caption = f"Table 3. Mean improvement over orig with paired bootstrap {pct} CIs."
    return Table("delta_ci", caption, data.reset_index(drop=True), display.reset_index(drop=True))


def _rate_table(name: str, caption: str, diag: pd.DataFrame, cols: Mapping[str, str],
                fmt: Mapping[str, Callable[[Any], str]] | None = None) -> Table:
    fmt = fmt or {}
    data = diag[["k", "system", *cols]].reset_index(drop=True)
    display = pd.DataFrame({"k": data["k"], "System": data["system"]})
    for col, title in cols.items():
        display[title] = data[col].map(fmt.get(col, _num))
    return Table(name, caption, data, display)


def known_cnt_table(diag: pd.DataFrame) -> Table:
    """Table 7: all_unknown rate and the distribution of known answers per instance."""
    kmax = int(diag["k"].max()) if len(diag) else 0
    cols = {"all_unknown_rate": "all_unknown"}
    cols.update({f"known_cnt_{i}": f"known_cnt={i}" for i in range(1, kmax + 1)})
    table = _rate_table("all_unknown", "Table 7. Interaction-level UA unknown diagnostics: all_unknown = all k "
                        "answers unknown; known_cnt = number of non-unknown answers.", diag, cols)
    for i in range(1, kmax + 1):  # a budget of k cannot have more than k known answers
        table.display.loc[table.data["k"] < i, f"known_cnt={i}"] = "–"
    return table


def turn_table(diag: pd.DataFrame) -> Table:
    """Table 10: region-only count and unknown rate per (system, turn)."""
    rows = [
        {"k": row.k, "system": row.system, "turn": t,
         "region_only_count": row[f"region_only_count_t{t}"],
         "region_only_unknown_rate": row[f"region_only_unknown_rate_t{t}"]}
        for _, row in diag.iterrows() for t in range(1, int(row.k) + 1)
        if row[f"region_only_count_t{t}"] > 0  # like the paper, only turns with region-only questions
    ]
    data = pd.DataFrame(rows, columns=["k", "system", "turn", "region_only_count", "region_only_unknown_rate"])
    display = pd.DataFrame({
        "k": data["k"], "(System, turn)": [f"({s}, {t})" for s, t in zip(data["system"], data["turn"])],
        "#region-only": data["region_only_count"].map(_count),
        "region-only unknown": data["region_only_unknown_rate"].map(_num),
    })
    return Table("turn_region_only", "Table 10. Turn-level UA unknown rate conditioned on region-only questions.",
                 data, display)


def range_table(turns: pd.DataFrame) -> Table:
    """Table 8: range of region-only unknown rates across systems and turns, per k."""
    rows = []
    for k, group in turns.groupby("k"):
        rates = group["region_only_unknown_rate"].dropna()
        rows.append({"k": k, "n_cells": float(len(rates)), "min": rates.min() if len(rates) else NAN,
                     "max": rates.max() if len(rates) else NAN})
    data = pd.DataFrame(rows, columns=["k", "n_cells", "min", "max"])
    display = pd.DataFrame({
        "Setting": [f"k={k}" for k in data["k"]],
        "Region-only unknown range": [f"{_num(a)}–{_num(b)}" for a, b in zip(data["min"], data["max"])],
        "(system, turn) cells": data["n_cells"].map(_count),
    })
    return Table("region_only_range", "Table 8. Range of UA unknown rates of region-only questions across "
                 "systems and turns.", data, display)


def build_tables(scores: pd.DataFrame, diag: pd.DataFrame, confidence: float) -> list[Table]:
    """Every table of the report from :func:`score_rows` and :func:`diagnostic_rows`.

    Without any clarifier job (``diag`` empty) only the score tables exist.
    """
    if diag.empty:
        return [scores_table(scores), delta_ci_table(scores, confidence)]
    turns = turn_table(diag)
    qtype_cols = {f"qtype_rate_{t}": f"share {t}" for t in QTYPES}
    qtype_cols.update({f"unknown_rate_{t}": f"unknown|{t}" for t in QTYPES})
    return [
        scores_table(scores),
        delta_ci_table(scores, confidence),
        _rate_table("ua_diagnostics", "Table 4. UA diagnostics: ua_unknown_rate = fraction of answers that are "
                    "unknown; cq_region_rate = fraction of questions about region.", diag,
                    {"ua_unknown_rate": "ua_unknown_rate", "cq_region_rate": "cq_region_rate"}),
        _rate_table("region_only", "Table 5. Region-only questions: count and UA unknown rate conditioned on "
                    "region-only.", diag,
                    {"region_only_count": "#region-only", "region_only_unknown_rate": "region-only unknown"},
                    {"region_only_count": _count}),
        known_cnt_table(diag),
        range_table(turns.data),
        turns,
        _rate_table("qtype_unknown", "Question types: share of questions per type and UA unknown rate per type.",
                    diag, qtype_cols),
    ]


def markdown(df: pd.DataFrame) -> str:
    """A GitHub-style Markdown table of ``df``'s cells (as strings)."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in df.columns) + " |",
             "| " + " | ".join("---" for _ in df.columns) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def latex(table: Table) -> str:
    """A booktabs LaTeX table of the formatted cells (special characters escaped)."""
    styler = table.display.style.hide(axis="index").format(escape="latex")
    styler = styler.format_index(escape="latex", axis=1)
    tex = styler.to_latex(caption=table.caption.replace("_", r"\_").replace("%", r"\%"),
                          label=f"tab:{table.name}", hrules=True, position_float="centering")
    return tex.replace("Δ", r"$\Delta$").replace("–", "--")


def write_table(table: Table, out_dir: Path) -> list[Path]:
    """Write ``<name>.csv`` (numbers), ``<name>.md`` and ``<name>.tex`` (formatted)."""
    paths = [out_dir / f"{table.name}.{ext}" for ext in ("csv", "md", "tex")]
    table.data.to_csv(paths[0], index=False)
    paths[1].write_text(f"**{table.caption}**\n\n{markdown(table.display)}", encoding="utf-8")
    paths[2].write_text(latex(table), encoding="utf-8")
    return paths


# ----------------------------------------------------------------------------- plots


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    return plt


def plot_scores(scores: pd.DataFrame, path: Path) -> Path:
    """Mean score (left) and delta vs orig (right) against k, one line per clarifier, CI bars."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    systems = [s for s in dict.fromkeys(scores["system"]) if s != ORIG]
    for i, system in enumerate([ORIG, *systems]):
        rows = scores[scores["system"] == system].sort_values("k")
        style = {"color": "0.4", "linestyle": "--", "marker": "s"} if system == ORIG else {"marker": "o"}
        err = [rows["mean"] - rows["mean_ci_low"], rows["mean_ci_high"] - rows["mean"]]
        left.errorbar(rows["k"] + 0.03 * i, rows["mean"], yerr=err, capsize=4, label=system, **style)
        if system != ORIG:
            d_err = [rows["delta"] - rows["delta_ci_low"], rows["delta_ci_high"] - rows["delta"]]
            right.errorbar(rows["k"] + 0.03 * i, rows["delta"], yerr=d_err, capsize=4, label=system, **style)
    right.axhline(0.0, color="0.4", linestyle="--", linewidth=1)
    ks = sorted(scores["k"].unique())
    for ax, ylabel, title in ((left, "mean restore_score_100", "Score vs. clarification budget"),
                              (right, "Δ vs. orig (paired)", "Improvement over orig")):
        ax.set_xticks(ks)
        ax.set_xlabel("k (questions)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} (95% bootstrap CI)")
        ax.grid(alpha=0.3)
    left.legend(fontsize="small", loc="best")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_unknown_vs_region(diag: pd.DataFrame, path: Path) -> Path:
    """UA unknown rate against the share of region questions, one colour per clarifier."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.8), constrained_layout=True)
    for system, rows in diag.sort_values("k").groupby("system", sort=True):
        (line,) = ax.plot(rows["cq_region_rate"], rows["ua_unknown_rate"], marker="o", markersize=8,
                          linewidth=1, alpha=0.8, label=system)
        ax.scatter(rows["cq_region_rate"], rows["region_only_unknown_rate"], s=60, marker="^",
                   facecolors="none", edgecolors=line.get_color())
        _annotate_ks(ax, rows)
    ax.scatter([], [], marker="^", facecolors="none", edgecolors="0.3", label="region-only unknown rate")
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("cq_region_rate (share of questions about region)")
    ax.set_ylabel("UA unknown rate")
    ax.set_title("Unknown rate vs. region-question rate")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _annotate_ks(ax: Any, rows: pd.DataFrame) -> None:
    """Label each point with its k (points that coincide share one label)."""
    points: dict[tuple[float, float], list[str]] = {}
    for x, y, k in zip(rows["cq_region_rate"], rows["ua_unknown_rate"], rows["k"]):
        if math.isfinite(x) and math.isfinite(y):
            points.setdefault((round(x, 3), round(y, 3)), []).append(str(k))
    for (x, y), ks in points.items():
        ax.annotate(f"k={','.join(ks)}", (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)


# ----------------------------------------------------------------------------- report


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


def _metric_key(*parts: Any) -> str:
    return re.sub(r"[^\w\-. /]", "_", ".".join(str(p) for p in parts))


def sweep_metrics(scores: pd.DataFrame, diag: pd.DataFrame) -> dict[str, float]:
    """Flatten the main numbers into MLflow metric names (``score_mean.<system>.k<k>``)."""
    out: dict[str, float] = {}
    for row in scores.itertuples(index=False):
        for name, col in (("score_mean", "mean"), ("delta_mean", "delta"), ("delta_ci_low", "delta_ci_low"),
                          ("delta_ci_high", "delta_ci_high")):
            out[_metric_key(name, row.system, f"k{row.k}")] = float(getattr(row, col))
    for row in diag.to_dict("records"):
        for name in ("ua_unknown_rate", "cq_region_rate", "region_only_unknown_rate", "all_unknown_rate"):
            out[_metric_key(name, row["system"], f"k{row['k']}")] = float(row[name])
    return {k: v for k, v in out.items() if math.isfinite(v)}


def write_report(jobs: Sequence[Job], out_dir: Path, stats: Stats, source: str = "") -> ReportResult:
    """Build every table and plot of ``jobs`` into ``out_dir`` (raises on failure)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    scores, diag = score_rows(jobs, stats), diagnostic_rows(jobs)
    tables = build_tables(scores, diag, stats.confidence)
    files = [p for t in tables for p in write_table(t, out_dir)]
    files.append(plot_scores(scores, out_dir / "score_vs_k.png"))
    if not diag.empty:
        files.append(plot_unknown_vs_region(diag, out_dir / "unknown_vs_region.png"))
    files.append(write_index(tables, [p for p in files if p.suffix == ".png"], out_dir, source, len(jobs)))
    return ReportResult(source, out_dir, {t.name: t.data for t in tables}, tuple(files),
                        sweep_metrics(scores, diag), len(jobs))


def write_index(tables: Sequence[Table], plots: Sequence[Path], out_dir: Path, source: str, n_jobs: int) -> Path:
    """Write ``report.md``: every table and plot on one page."""
    head = (f"# Sweep report\n\nSource: `{source}` ({n_jobs} jobs). Files: CSV (numbers), "
            "Markdown and LaTeX (formatted) per table.\n")
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
    *,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> ReportResult:
    """Build the paper's tables and plots for a sweep. Never raises (safe in Hydra callbacks).

    Args:
        source: A Hydra sweep dir, a list of job dirs, or an MLflow experiment name.
        out_dir: Where to write (default :func:`default_out_dir`).
        tracking_uri: MLflow tracking URI (needed for an experiment name).
        n_resamples: Bootstrap resamples for every CI.
        confidence: CI level.
        seed: Bootstrap seed.

    Returns:
        The result; ``result.errors`` is non-empty (and logged) when something failed.
    """
    name = str(source)
    try:
        jobs = load_jobs(source, tracking_uri)
        if not jobs:
            raise ValueError(f"no finished job found in {name}")
        out = Path(out_dir) if out_dir is not None else default_out_dir(source)
        result = write_report(jobs, out, Stats(n_resamples, confidence, seed), name)
        log.info("sweep report (%d jobs) written to %s", len(jobs), out)
        return result
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
        return tracking.log_report_run(tracking_uri, experiment, f"report:{Path(result.source).name}",
                                       metrics, [result.out_dir], tags={"cts.sweep_dir": result.source})
    except Exception:
        log.exception("logging the sweep report of %s failed", result.source)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cts.report <sweep dir | experiment> [--tracking-uri URI] [--out DIR] [--log]``."""
    parser = argparse.ArgumentParser(prog="python -m cts.report", description=__doc__.split("\n")[0])
    parser.add_argument("source", nargs="+", help="a sweep dir, job dirs, or an MLflow experiment name")
    parser.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (for an experiment name)")
    parser.add_argument("--out", type=Path, default=None, help="output dir (default: <sweep>/report)")
    parser.add_argument("--n-resamples", type=int, default=10_000)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--log", metavar="EXPERIMENT", default=None,
                        help="also log the report as an MLflow run in EXPERIMENT (needs --tracking-uri)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    source = args.source[0] if len(args.source) == 1 else args.source
    uri = args.tracking_uri or _default_uri()
    result = build_sweep_report(source, args.out, uri, n_resamples=args.n_resamples, confidence=args.confidence)
    if not result.ok or result.out_dir is None:
        print("\n".join(result.errors), file=sys.stderr)
        return 1
    if args.log:
        log_sweep_report(result, uri, args.log)
    print(f"{result.n_jobs} jobs -> {result.out_dir / 'report.md'}")
    return 0


def _default_uri() -> str:
    import os

    return os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///outputs/mlflow.db")


if __name__ == "__main__":
    sys.exit(main())
