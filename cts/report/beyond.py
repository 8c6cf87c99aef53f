"""Sweep-report sections beyond the paper: batch vs sequential, ask-or-not gating, cost-quality frontier.

Every number is recomputed from the jobs' records; gating is post hoc (no search
or judge call). :func:`extra_report` is the one hook the sweep report calls.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cts.core.records import Record
from cts.core.stages import clarify_roles
from cts.protocol.metrics import interaction_metrics, questions_asked_mean
from cts.protocol.repeats import instance_means
from cts.report.gate_evaluation import evaluate_gates
from cts.report.jobs import ORIG
from cts.report.plots import figure
from cts.report.tables import Table
from cts.roles.gates import AlwaysGate, NeverGate, OracleGate, RuleGate
from cts.stats.bootstrap import paired_bootstrap_ci

log = logging.getLogger(__name__)

NAN = float("nan")


def _fmt(v: Any, signed: bool = False) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:+.3f}" if signed else f"{v:.3f}"


def _paired(records: Sequence[Record]) -> tuple[list[float], list[float]]:
    pairs = [(r.score, r.orig_score) for r in records if r.score is not None and r.orig_score is not None]
    return [float(p[0]) for p in pairs], [float(p[1]) for p in pairs]


# ----------------------------------------------------------------- batch vs sequential


def sequential_rows(jobs: Sequence[Any], bootstrap: Any) -> pd.DataFrame:
    """Per (k, system, mode): score, Δ vs orig with paired CI, all_unknown_rate, questions asked.

    As in the job's metrics, the scores and the CI are over instances (repeats reduced,
    :func:`cts.protocol.repeats.instance_means`), the interaction rates over every record.
    """
    rows = []
    for j in jobs:
        if j.is_orig:
            continue
        reduced = instance_means(j.records)
        clarified_s, orig_s = _paired(reduced)
        delta, low, high = paired_bootstrap_ci(clarified_s, orig_s, bootstrap)
        scores = [r.score for r in reduced if r.score is not None]
        rows.append(
            {
                "k": j.k,
                "system": j.label,
                "mode": j.mode,
                "n": float(len(scores)),
                "score": float(np.mean(scores)) if scores else NAN,
                "delta": delta,
                "delta_ci_low": low,
                "delta_ci_high": high,
                "all_unknown_rate": interaction_metrics(list(j.records), j.k)["all_unknown_rate"],
                "questions_asked_mean": questions_asked_mean(j.records),
            }
        )
    cols = [
        "k",
        "system",
        "mode",
        "n",
        "score",
        "delta",
        "delta_ci_low",
        "delta_ci_high",
        "all_unknown_rate",
        "questions_asked_mean",
    ]
    return pd.DataFrame(rows, columns=cols).sort_values(["k", "system", "mode"]).reset_index(drop=True)


def sequential_table(rows: pd.DataFrame, confidence: float) -> Any:
    """Batch and sequential side by side per k (consecutive rows of one system)."""

    pct = f"{confidence:.0%}"
    display = pd.DataFrame(
        {
            "k": rows["k"],
            "System": rows["system"],
            "mode": rows["mode"],
            "n": rows["n"].map(lambda v: str(int(v))),
            "score": rows["score"].map(_fmt),
            "Δ vs. orig": rows["delta"].map(lambda v: _fmt(v, True)),
            f"{pct} CI": [f"[{_fmt(a)}, {_fmt(b)}]" for a, b in zip(rows["delta_ci_low"], rows["delta_ci_high"])],
            "all_unknown": rows["all_unknown_rate"].map(_fmt),
            "questions asked": rows["questions_asked_mean"].map(_fmt),
        }
    )
    caption = (
        "Batch vs. sequential clarification per k: restore_score_100, paired Δ vs. orig with "
        f"bootstrap {pct} CI, all_unknown rate and mean questions asked per instance."
    )
    return Table("batch_vs_sequential", caption, rows, display)


# ----------------------------------------------------------------- gating


def default_gates() -> dict[str, Any]:
    """The gates every report evaluates post hoc (no LLM: the LLM gate runs via ``python -m cts.gating``)."""
    gates: dict[str, Any] = {"always": AlwaysGate(), "never": NeverGate(), "oracle": OracleGate()}
    try:
        from cts.corpus.wiki import load_corpus

        gates["rules"] = RuleGate(titles=[d.title for d in load_corpus("en-us").docs])
    except Exception as e:  # noqa: BLE001 - the corpus package missing must not stop the report
        log.warning("rules gate skipped (no corpus titles): %s", e)
    return gates


def gating_rows(jobs: Sequence[Any], bootstrap: Any, gates: Mapping[str, Any]) -> pd.DataFrame:
    """One row per (clarified job, gate): the :class:`cts.report.gate_evaluation.GateResult` fields.

    ``n`` and the CI count instances (repeats reduced by :func:`cts.report.gate_evaluation.gateable`);
    the cost is the mean over every record (each repeat paid for its own clarification).
    """
    pairs = [(j, name, gate) for j in jobs if not j.is_orig for name, gate in gates.items()]
    evaluated = evaluate_gates([j.records for j, _, _ in pairs], [g for _, _, g in pairs], bootstrap)
    rows, spends = [], {}
    for (j, name, _), (result, decisions) in zip(pairs, evaluated):
        asked = {i for i, d in decisions.items() if d.ask}
        if id(j) not in spends:  # a job's spend is priced once, for all its gates
            spends[id(j)] = _clarify_spend(j.records)
        cost, unit = _clarify_cost(j.records, asked, spends[id(j)])
        rows.append(
            {
                "k": j.k,
                "system": j.label,
                "mode": j.mode,
                "setting": j.setting,
                "gate": name,
                **asdict(result),
                "cost_per_instance": cost,
                "cost_unit": unit,
            }
        )
    return pd.DataFrame(rows)


def gating_table(rows: pd.DataFrame, confidence: float) -> Any:
    """Ask rate, gated score, Δ vs orig (paired CI), Δ vs always, precision/recall vs oracle, questions."""

    pct = f"{confidence:.0%}"
    display = pd.DataFrame(
        {
            "k": rows["k"],
            "System": rows["system"],
            "mode": rows["mode"],
            "gate": rows["gate"],
            "n": rows["n"],
            "ask_rate": rows["ask_rate"].map(_fmt),
            "score": rows["score_mean"].map(_fmt),
            "Δ vs. orig": rows["delta_vs_orig"].map(lambda v: _fmt(v, True)),
            f"{pct} CI": [f"[{_fmt(a)}, {_fmt(b)}]" for a, b in zip(rows["delta_ci_low"], rows["delta_ci_high"])],
            "Δ vs. always": rows["delta_vs_always"].map(lambda v: _fmt(v, True)),
            "precision": rows["precision"].map(_fmt),
            "recall": rows["recall"].map(_fmt),
            "questions/instance": rows["questions_per_instance"].map(_fmt),
        }
    )
    caption = (
        "Ask-or-not gating, evaluated post hoc over the finished records (0 search and 0 judge calls): "
        "the gated score takes the clarified arm where the gate asks and orig elsewhere; precision and "
        "recall are against the oracle (ask iff clarification beat orig)."
    )
    return Table("gating", caption, rows.drop(columns=["cost_unit"]), display)


# ----------------------------------------------------------------- frontier


def _clarify_cost(
    records: Sequence[Record], asked: set[str], spend: Mapping[str, Sequence[float]] | None = None
) -> tuple[float, str]:
    """Mean per-instance spend of the clarification roles on asked instances, in USD, else tokens, else questions.

    Records do not split search and judge spend by arm, so the cost axis counts what
    clarifying adds in the roles that exist only for it.
    """
    if not records:
        return NAN, "questions"
    for unit, spent in (spend if spend is not None else _clarify_spend(records)).items():
        per = [s if r.id in asked else 0.0 for r, s in zip(records, spent)]
        if any(per):
            return float(np.mean(per)), unit
    return float(np.mean([len(r.questions) if r.id in asked else 0 for r in records])), "questions"


_SPEND_FIELDS = {"usd": ("cost_usd",), "tokens": ("tokens_in", "tokens_out")}


def _clarify_spend(records: Sequence[Record]) -> dict[str, list[float]]:
    """Per record and unit (USD, then tokens): what the clarification roles spent (the same for every gate)."""
    clarifying = clarify_roles()
    return {
        unit: [
            sum(float(u.get(f, 0.0)) for role, u in r.usage.items() if role in clarifying for f in fields)
            for r in records
        ]
        for unit, fields in _SPEND_FIELDS.items()
    }


def pareto(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which (cost, score) points no other point dominates (cost <= and score >=, one strictly)."""
    out = []
    for c, s in points:
        dominated = any((c2 <= c and s2 >= s) and (c2 < c or s2 > s) for c2, s2 in points)
        out.append(not dominated and math.isfinite(c) and math.isfinite(s))
    return out


def frontier_rows(gating: pd.DataFrame) -> pd.DataFrame:
    """Per (system, k, mode, gate): mean score vs cost per instance, Pareto points marked.

    The oracle is an upper bound, not a system: it is listed but never on the frontier.
    ``never`` is the orig arm, shared by the jobs of one setting, so it is listed once per setting
    (``orig``, or ``orig[judge=strict]`` when settings vary), scored by the mean over those jobs
    (equal when they share the orig arm: each job's gated scores are over its instances, in id order).
    """
    if gating.empty:
        return pd.DataFrame()
    cols = [
        "system",
        "k",
        "mode",
        "setting",
        "gate",
        "score_mean",
        "cost_per_instance",
        "cost_unit",
        "questions_per_instance",
    ]
    df = gating.assign(setting=gating.get("setting", ""))[cols]
    never = (
        df[df["gate"] == "never"]
        .groupby("setting", as_index=False, sort=True)
        .agg(
            {
                "gate": "first",
                "score_mean": "mean",
                "cost_per_instance": "first",
                "cost_unit": "first",
                "questions_per_instance": "first",
            }
        )
    )
    never = never.assign(system=[f"{ORIG}[{s}]" if s else ORIG for s in never["setting"]], mode="–", k="any")
    df = pd.concat([df[df["gate"] != "never"], never[cols]], ignore_index=True).drop(columns=["setting"])
    units = set(df["cost_unit"])
    if len(units) > 1:  # mixed units are not comparable: fall back to the common one, questions
        df["cost_per_instance"], df["cost_unit"] = df["questions_per_instance"], "questions"
    real = df["gate"] != "oracle"
    marks = pareto(list(zip(df.loc[real, "cost_per_instance"], df.loc[real, "score_mean"])))
    df["pareto"] = False
    df.loc[real, "pareto"] = marks
    return df.sort_values(["cost_per_instance", "score_mean"]).reset_index(drop=True)


def frontier_table(rows: pd.DataFrame) -> Any:
    """The cost-quality table (``*`` marks the Pareto frontier)."""

    unit = rows["cost_unit"].iloc[0] if len(rows) else "questions"
    display = pd.DataFrame(
        {
            "System": rows["system"],
            "k": rows["k"].astype(str),
            "mode": rows["mode"],
            "gate": rows["gate"],
            "score": rows["score_mean"].map(_fmt),
            f"cost/instance ({unit})": rows["cost_per_instance"].map(_fmt),
            "questions/instance": rows["questions_per_instance"].map(_fmt),
            "Pareto": rows["pareto"].map(lambda p: "*" if p else ""),
        }
    )
    caption = (
        f"Cost-quality frontier: mean restore score vs. clarification cost per instance ({unit}); "
        "* = Pareto-optimal (the oracle is an upper bound and never counts)."
    )
    return Table("frontier", caption, rows, display)


def plot_frontier(rows: pd.DataFrame, path: Path, x: str, xlabel: str, title: str) -> Path:
    """Score against ``x`` per point (colour per gate), the Pareto frontier as a step line."""

    fig, ax = figure((7.5, 5))
    for gate, g in rows.groupby("gate", sort=True):
        ax.scatter(g[x], g["score_mean"], label=f"gate={gate}", marker="^" if gate == "oracle" else "o", s=40)
    front = rows[rows["pareto"]].sort_values(x)
    if len(front):
        ax.step(front[x], front["score_mean"], where="post", color="0.2", linewidth=1.2, label="Pareto frontier")
    for (px, py), tied in front.groupby([x, "score_mean"], sort=False):
        first = tied.iloc[0]
        more = f" (+{len(tied) - 1} tied)" if len(tied) > 1 else ""
        ax.annotate(
            f"{first['system']} k={first['k']} {first['mode']} {first['gate']}{more}",
            (px, py),
            fontsize=6,
            textcoords="offset points",
            xytext=(4, -8),
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean restore_score_100")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    fig.savefig(path, dpi=120)
    return path


def extra_report(jobs: Sequence[Any], bootstrap: Any, out_dir: Path) -> tuple[list[Any], list[Path], dict[str, float]]:
    """Tables, plots and MLflow metrics of the sections above for the sweep report."""
    if not any(not j.is_orig for j in jobs):
        return [], [], {}
    seq = sequential_rows(jobs, bootstrap)
    gating = gating_rows(jobs, bootstrap, default_gates())
    front = frontier_rows(gating)
    tables = [
        sequential_table(seq, bootstrap.confidence),
        gating_table(gating, bootstrap.confidence),
        frontier_table(front),
    ]
    unit = front["cost_unit"].iloc[0]
    plots = [
        plot_frontier(
            front,
            out_dir / "frontier.png",
            "cost_per_instance",
            f"clarification cost per instance ({unit})",
            "Cost-quality frontier",
        ),
        plot_frontier(
            front,
            out_dir / "score_vs_questions.png",
            "questions_per_instance",
            "questions asked per instance (user burden)",
            "Score vs. questions asked",
        ),
    ]
    return tables, plots, _metrics(seq, gating)


def _metrics(seq: pd.DataFrame, gating: pd.DataFrame) -> dict[str, float]:
    """``questions_asked_mean.<system>.<mode>.k<k>`` and ``gate_<stat>.<system>.<gate>.k<k>[.<mode>]``.

    The mode ends a gate metric's name only when the sweep has several (as the mode column does).
    """
    out: dict[str, float] = {}
    for r in seq.itertuples(index=False):
        out[_key("questions_asked_mean", r.system, r.mode, f"k{r.k}")] = float(r.questions_asked_mean)
    several = gating["mode"].nunique() > 1 if len(gating) else False
    for r in gating.itertuples(index=False):
        mode = (r.mode,) if several else ()
        for name in ("ask_rate", "score_mean", "delta_vs_orig", "delta_vs_always", "precision", "recall"):
            out[_key(f"gate_{name}", r.system, r.gate, f"k{r.k}", *mode)] = float(getattr(r, name))
    return {k: v for k, v in out.items() if math.isfinite(v)}


def _key(*parts: Any) -> str:
    return re.sub(r"[^\w\-. /]", "_", ".".join(str(p) for p in parts))
