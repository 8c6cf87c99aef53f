"""The by-persona table: a clarifier's robustness to the kind of user, in one table.

For every job whose UA played a persona (``ua/persona``, :mod:`cts.roles.personas`): its score,
its Δ vs orig and its Δ vs the cooperative persona of the same system, k and setting (paired
over instance means; cluster bootstrap when the sweep set ``dataset.cluster_field``), beside the
fidelity audit of the UA's answers (:mod:`cts.protocol.fidelity`: unknown rate, leak rate,
answer length, minimality) from the job's metrics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from cts.protocol.repeats import instance_means
from cts.report.jobs import Job
from cts.report.tables import Table
from cts.stats.bootstrap import Resampling, paired_bootstrap_ci
from cts.stats.cluster import cluster_bootstrap_ci

PERSONA = "ua/persona"
COOPERATIVE = "cooperative"
NAN = float("nan")
AUDIT = ("ua_unknown_rate", "ua_leak_rate", "ua_answer_tokens", "ua_minimality")


def _scores(job: Job) -> dict[str, float]:
    return {r.id: float(r.score) for r in instance_means(list(job.records)) if r.score is not None}


def _origs(job: Job) -> dict[str, float]:
    return {r.id: float(r.orig_score) for r in instance_means(list(job.records)) if r.orig_score is not None}


def _ci(job: Job, a: dict[str, float], b: dict[str, float], bootstrap: Resampling) -> tuple[float, float, float, int]:
    ids = sorted(set(a) & set(b))
    x, y = [a[i] for i in ids], [b[i] for i in ids]
    if job.cluster_field and job.clusters:
        ci = cluster_bootstrap_ci(x, y, [job.clusters.get(i, i) for i in ids], bootstrap)
        return ci.mean, ci.low, ci.high, len(ids)
    return (*paired_bootstrap_ci(x, y, bootstrap), len(ids))


def _group(job: Job) -> tuple[Any, ...]:
    return job.k, job.system, tuple(sorted((k, v) for k, v in job.factors.items() if k != PERSONA))


def persona_rows(jobs: Sequence[Job], bootstrap: Resampling) -> pd.DataFrame:
    """Per persona job: score, Δ vs orig, Δ vs the cooperative persona of its group, and the audit."""
    played = [j for j in jobs if not j.is_orig and j.choices.get(PERSONA)]
    cooperative = {_group(j): j for j in played if j.choices[PERSONA] == COOPERATIVE}
    rows = []
    for j in sorted(played, key=lambda j: (j.k, j.system, j.choices[PERSONA] != COOPERATIVE, j.choices[PERSONA])):
        scores = _scores(j)
        d, low, high, n = _ci(j, scores, _origs(j), bootstrap)
        base = cooperative.get(_group(j))
        vs = _ci(j, scores, _scores(base), bootstrap)[:3] if base is not None and base is not j else (NAN,) * 3
        rows.append(
            {
                "k": j.k,
                "system": j.system,
                "persona": j.choices[PERSONA],
                "n": float(n),
                "score": float(np.mean(list(scores.values()))) if scores else NAN,
                "delta": d,
                "delta_ci_low": low,
                "delta_ci_high": high,
                "vs_cooperative": vs[0],
                "vs_cooperative_ci_low": vs[1],
                "vs_cooperative_ci_high": vs[2],
                **{m: float(j.metrics.get(m, NAN)) for m in AUDIT},
            }
        )
    return pd.DataFrame(rows)


def _f(v: float, signed: bool = False) -> str:
    return "–" if not math.isfinite(v) else (f"{v:+.2f}" if signed else f"{v:.3f}")


def persona_table(rows: pd.DataFrame, confidence: float) -> Table:
    """The by-persona table (see the module docstring)."""
    level = f"{confidence:.0%} CI"
    shown = pd.DataFrame(
        [
            {
                "k": r["k"],
                "System": r["system"],
                "Persona": r["persona"],
                "n": int(r["n"]),
                "Score": f"{r['score']:.2f}",
                f"Δ vs orig [{level}]": f"{_f(r['delta'], True)} [{_f(r['delta_ci_low'], True)}, {_f(r['delta_ci_high'], True)}]",
                f"Δ vs cooperative [{level}]": "–"
                if not math.isfinite(r["vs_cooperative"])
                else f"{_f(r['vs_cooperative'], True)} [{_f(r['vs_cooperative_ci_low'], True)}, {_f(r['vs_cooperative_ci_high'], True)}]",
                "unknown": _f(r["ua_unknown_rate"]),
                "leaks": _f(r["ua_leak_rate"]),
                "answer tokens": _f(r["ua_answer_tokens"]),
                "answer/question": _f(r["ua_minimality"]),
            }
            for r in rows.to_dict("records")
        ]
    )
    caption = (
        "Simulated users (ua/persona): score and Δ by persona, and the audit of the UA's answers "
        "(unknown rate; leaks = answers adding a fact not in q*; answer length and its ratio to the question's)"
    )
    return Table("personas", caption, rows, shown)


def persona_report(jobs: Sequence[Job], bootstrap: Resampling) -> list[Table]:
    """The by-persona table when some job played a persona (else none)."""
    rows = persona_rows(jobs, bootstrap)
    return [persona_table(rows, bootstrap.confidence)] if not rows.empty else []
