"""Prediction-powered scores: each system's restore_score_100 and Δ vs orig, the judge corrected by people.

The judge scored every instance; people labelled the nuggets of a random few (``python -m
cts.agreement``). An arm counts as labelled when the annotators' majority labels every gold
nugget of it; its human score is then restore_score_100 of those labels. Per system job (repeat 0,
the answers people saw), :func:`cts.stats.ppi.ppi_mean_ci` (PPI++) gives

- ``score_ppi``: the clarified arm's mean human score, from the judge's scores of every instance
  and the labelled instances' judge-minus-human gap;
- ``delta_ppi``: the mean human Δ vs orig, over the instances where both arms were scored, labelled
  where people labelled both arms of the instance.

Valid when the labelled instances are a uniform random sample of the job's instances (the review
queue draws one per stratum: :mod:`cts.agreement.queue`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from cts.report.agreement import Agreement, arm_names
from cts.report.jobs import Job
from cts.report.tables import Table
from cts.stats.ppi import PPIEstimate, ppi_mean_ci

__all__ = ["PPI_COLUMNS", "PPI_METRICS", "imported_ppi", "job_ppi", "ppi_metrics", "ppi_rows", "ppi_table", "with_ppi"]

PPI_COLUMNS = (
    "n_labelled",
    "score_ppi",
    "score_ppi_low",
    "score_ppi_high",
    "n_labelled_delta",
    "delta_ppi",
    "delta_ppi_low",
    "delta_ppi_high",
)

PPI_METRICS = tuple(c for c in PPI_COLUMNS if c != "n_labelled_delta")
"""The MLflow metrics of a job run (and, ``<metric>.<system>.k<k>``, of the sweep report)."""


def _split(
    items: Sequence[tuple[str, float]], human: Mapping[str, float]
) -> tuple[list[float], list[float], list[float]]:
    """(human values, judge values of the labelled items, judge values of the others)."""
    y = [human[i] for i, _ in items if i in human]
    f = [v for i, v in items if i in human]
    rest = [v for i, v in items if i not in human]
    return y, f, rest


def _human_scores(inp: Agreement, arm: str) -> dict[str, float]:
    """Instance -> the majority's restore_score_100 of ``arm`` (only arms whose every nugget is labelled)."""
    out = {}
    for (instance, name), labels in inp.majority.items():
        score = inp.score((instance, name), labels) if name == arm else None
        if score is not None:
            out[instance] = score
    return out


def job_ppi(job: Job, clarified: str, orig: str, inp: Agreement, confidence: float) -> tuple[PPIEstimate, PPIEstimate]:
    """The job's prediction-powered score and Δ vs orig (repeat 0)."""
    records = [r for r in job.records if r.repeat == 0]
    human = _human_scores(inp, clarified)
    human_orig = _human_scores(inp, orig)
    scored = [(r.id, float(r.score)) for r in records if r.score is not None]
    score = ppi_mean_ci(*_split(scored, human), confidence=confidence)
    both = [(r.id, float(r.score - r.orig_score)) for r in records if r.score is not None and r.orig_score is not None]
    human_delta = {i: human[i] - human_orig[i] for i in human if i in human_orig}
    delta = ppi_mean_ci(*_split(both, human_delta), confidence=confidence)
    return score, delta


def ppi_rows(jobs: Sequence[Job], inp: Agreement, confidence: float) -> pd.DataFrame:
    """One row per system job: ``system`` (its label), ``k``, ``mode``, ``run_id`` and :data:`PPI_COLUMNS`."""
    rows = []
    for job, (clarified, orig) in zip(jobs, arm_names(jobs)):
        if clarified is None:
            continue
        score, delta = job_ppi(job, clarified, orig, inp, confidence)
        rows.append(
            {
                "k": job.k,
                "system": job.label,
                "mode": job.mode,
                "run_id": job.run_id,
                "n_labelled": float(score.n_labelled),
                "score_ppi": score.mean,
                "score_ppi_low": score.low,
                "score_ppi_high": score.high,
                "n_labelled_delta": float(delta.n_labelled),
                "delta_ppi": delta.mean,
                "delta_ppi_low": delta.low,
                "delta_ppi_high": delta.high,
            }
        )
    return pd.DataFrame(rows, columns=["k", "system", "mode", "run_id", *PPI_COLUMNS])


def with_ppi(scores: pd.DataFrame, ppi: pd.DataFrame | None) -> pd.DataFrame:
    """``scores`` (:func:`cts.report.rows.score_rows`) with the PPI columns of its system rows (NaN elsewhere)."""
    if ppi is None or ppi.empty or scores.empty:
        return scores
    merged = scores.merge(ppi.drop(columns="run_id"), on=["k", "system", "mode"], how="left")
    return merged


def ppi_metrics(ppi: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Run id -> ``score_ppi``, ``delta_ppi``, their ``_low``/``_high`` and ``n_labelled`` (finite values)."""
    out: dict[str, dict[str, float]] = {}
    for r in ppi.to_dict("records"):
        values: dict[str, Any] = {c: r[c] for c in PPI_METRICS}
        if r["run_id"]:
            out[str(r["run_id"])] = {k: float(v) for k, v in values.items() if math.isfinite(float(v))}
    return out


def imported_ppi(source: Any, jobs: Sequence[Job], confidence: float) -> pd.DataFrame | None:
    """:func:`ppi_rows` of a sweep dir whose labels were imported (``python -m cts.agreement``); else None."""
    from pathlib import Path

    from cts.data.human_labels import imported_labels
    from cts.report.agreement import agreement_of

    found = imported_labels(source) if isinstance(source, (str, Path)) and Path(source).is_dir() else None
    if found is None:
        return None
    labels, weights = found
    return ppi_rows(jobs, agreement_of(jobs, labels, weights), confidence)


def ppi_table(rows: pd.DataFrame, confidence: float) -> Table:
    """``human_ppi``: per system job, the labelled count, the PPI mean and Δ vs orig with their intervals."""
    pct = f"{confidence:.0%} CI"

    def ci(r: Mapping[str, Any], name: str, signed: bool) -> str:
        vals = [float(r[name]), float(r[f"{name}_low"]), float(r[f"{name}_high"])]
        shown = ["–" if not math.isfinite(v) else (f"{v:+.2f}" if signed else f"{v:.2f}") for v in vals]
        return f"{shown[0]} [{shown[1]}, {shown[2]}]"

    display = pd.DataFrame(
        [
            {
                "k": r["k"],
                "System": r["system"],
                "n labelled": int(r["n_labelled"]),
                f"restore_score_100 PPI [{pct}]": ci(r, "score_ppi", False),
                "n labelled (both arms)": int(r["n_labelled_delta"]),
                f"Δ vs orig PPI [{pct}]": ci(r, "delta_ppi", True),
            }
            for r in rows.to_dict("records")
        ]
    )
    caption = (
        "Prediction-powered (PPI++) human restore_score_100 and Δ vs orig: the judge's scores of every "
        "instance, corrected by its gap to people's labels on the labelled ones"
    )
    return Table("human_ppi", caption, rows, display)
