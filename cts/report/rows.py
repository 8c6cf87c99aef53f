"""Rows of numbers per system and k, recomputed from the records (scores, diagnostics)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from cts.protocol.diagnostics import diagnostics
from cts.protocol.repeats import instance_means
from cts.protocol.unscored import unscored_rates
from cts.report.jobs import NO_MODE, ORIG, Job
from cts.stats.bootstrap import Resampling, mean_ci
from cts.stats.compare import Comparison, PValueTest, paired_comparison
from cts.stats.multiplicity import holm

log = logging.getLogger(__name__)

NAN = float("nan")


def _finite(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def _dist(scores: Sequence[float]) -> dict[str, float]:
    a = np.asarray(scores, dtype=float)
    if a.size == 0:
        return {"n": 0.0, "mean": NAN, "p50": NAN, "p90": NAN}
    return {"n": float(a.size), "mean": float(a.mean()), "p50": float(np.median(a)), "p90": float(np.percentile(a, 90))}


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
    return [
        (k, ",".join(f"{key}={dict(f).get(key)}" for key in varying), js)
        for (k, f), js in sorted(groups.items(), key=lambda g: (g[0][0], str(g[0][1])))
    ]


def paired(job: Job) -> tuple[list[float], list[float]]:
    """Clarified-arm and orig scores of the instances where both arms are scored."""
    reduced = instance_means(job.records)  # one per instance (repeats' means), in id order as the job's metrics
    pairs = [(r.score, r.orig_score) for r in reduced if r.score is not None and r.orig_score is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def comparison(job: Job, bootstrap: Resampling, p_value: PValueTest = "bootstrap") -> Comparison:
    """The job's paired comparison with orig: clustered when its summary names clusters (:mod:`cts.stats.compare`)."""
    pairs = [r for r in instance_means(job.records) if r.score is not None and r.orig_score is not None]
    labels = None
    if job.cluster_field:  # in id order, as the job's metrics (cts.protocol.metrics.cluster_metrics)
        pairs = sorted(pairs, key=lambda r: r.id)
        labels = [job.clusters.get(r.id, ("instance", r.id)) for r in pairs]
    scores, origs = [r.score for r in pairs], [r.orig_score for r in pairs]
    return paired_comparison(scores, origs, labels, bootstrap, p_value=p_value)  # type: ignore[arg-type]  # pairs: both scores set


def _comparison_columns(job: Job | None, c: Comparison | None) -> dict[str, object]:
    """Table 3's test columns of a row (NaN for an orig row); ``p_holm`` is added over the whole sweep."""
    if job is None or c is None:
        return {"p_value": NAN, "n_clusters": NAN, "design_effect": NAN, "cluster_field": ""}
    n_clusters = NAN if c.n_clusters is None else float(c.n_clusters)
    return {
        "p_value": c.p_value,
        "n_clusters": n_clusters,
        "design_effect": c.design_effect,
        "cluster_field": job.cluster_field or "",
    }


def score_rows(jobs: Sequence[Job], bootstrap: Resampling, p_value: PValueTest = "bootstrap") -> pd.DataFrame:
    """Tables 2/3/6 numbers: one orig row per k, then one row per system job.

    Each system row also has its p-value against orig (``p_value``, by ``p_value`` test) and
    the Holm-adjusted one over every system row of the sweep (``p_holm``).
    """
    rows = []
    for k, setting, at_k in _settings(jobs):
        origs = orig_scores(at_k)  # pooled only over jobs of one setting (search, judge, dataset ...)
        _, low, high = mean_ci(list(origs.values()), bootstrap)
        rows.append(
            {
                "k": k,
                "system": f"{ORIG}[{setting}]" if setting else ORIG,
                "mode": NO_MODE,
                **_dist(list(origs.values())),
                "mean_ci_low": low,
                "mean_ci_high": high,
                "n_paired": NAN,
                "delta": NAN,
                "delta_ci_low": NAN,
                "delta_ci_high": NAN,
                **_comparison_columns(None, None),
            }
        )
        for j in at_k:
            if j.is_orig:
                continue
            scores = _finite(r.score for r in instance_means(j.records))
            _, low, high = mean_ci(scores, bootstrap)
            c = comparison(j, bootstrap, p_value)
            rows.append(
                {
                    "k": k,
                    "system": j.label,
                    "mode": j.mode,
                    **_dist(scores),
                    "mean_ci_low": low,
                    "mean_ci_high": high,
                    "n_paired": float(len(paired(j)[0])),
                    "delta": c.mean,
                    "delta_ci_low": c.low,
                    "delta_ci_high": c.high,
                    **_comparison_columns(j, c),
                }
            )
    out = pd.DataFrame(rows)
    if rows:  # one family: every comparison with orig in the sweep (every k and setting)
        out["p_holm"] = holm(list(out["p_value"]))
        out["p_test"] = p_value
    return out


def diagnostic_rows(jobs: Sequence[Job]) -> pd.DataFrame:
    """Per system job: interaction metrics (unknown rates, known counts) and diagnostics."""
    from cts.protocol.metrics import interaction_metrics

    rows = [
        {
            "k": j.k,
            "system": j.label,
            "mode": j.mode,
            **interaction_metrics(list(j.records), j.k),
            **diagnostics(j.records),
            **unscored_rates(j.records),
        }
        for j in jobs
        if not j.is_orig
    ]
    return pd.DataFrame(rows)
