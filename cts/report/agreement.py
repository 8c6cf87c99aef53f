"""How well each judge of a sweep agrees with people: human nugget labels against the recorded ones.

Inputs: a finished sweep's jobs, human labels (:mod:`cts.data.human_labels`: instance, arm,
nugget, label, annotator) and the gold weights of the labelled nuggets. A *judge* is a job's
judge option (``lexical``, ``gpt``, plus any swept ``judge.*`` key), and each member of a
judge panel (``panel/<member>``); its labels of an arm are the ones recorded in repeat 0.
An *arm* is ``orig`` or a clarified arm named by its job (:func:`arm_names`).

Tables (every CI a cluster bootstrap over instances, or over ``dataset.cluster_field``'s
clusters when the sweep set it; :mod:`cts.stats.agreement`):

- ``human_ceiling``: Krippendorff's alpha (ordinal) among all annotators, then each pair's
  weighted kappa and alpha: the agreement a judge can be expected to reach, first;
- ``human_agreement``: per judge, against each annotator and against their majority
  (:func:`cts.core.scoring.majority_label`, ties to the lower label): weighted kappa, alpha,
  exact agreement, and the score shift (judge's restore_score_100 minus the human's, over the
  arms whose every gold nugget the reference labelled);
- ``human_confusion``: per judge, the counts of (majority label, judge label).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cts.core.scoring import CREDIT, ORDINAL, majority_label
from cts.core.types import LABELS, Label
from cts.data.human_labels import HumanLabel
from cts.report.jobs import Job
from cts.report.tables import Table
from cts.stats.agreement import Weights, alpha_ci, confusion_counts, kappa_ci
from cts.stats.bootstrap import Resampling
from cts.stats.cluster import cluster_bootstrap_ci

NAN = float("nan")
MAJORITY = "majority"
ArmKey = tuple[str, str]
"""(instance id, arm name)."""
ArmLabels = Mapping[ArmKey, Mapping[str, Label]]

__all__ = [
    "MAJORITY",
    "Agreement",
    "agreement_of",
    "agreement_report",
    "imported_report",
    "arm_names",
    "judge_labels",
    "judge_name",
    "label_problems",
]


def _judge_key(key: str) -> bool:
    return key == "judge" or key.startswith(("judge.", "judge/", "model@judge"))


def judge_name(job: Job) -> str:
    """The job's judge: its option, plus any judge setting the job overrides (``lexical[judge.full=0.9]``)."""
    keys = sorted(k for k in job.factors if _judge_key(k) and k != "judge")
    base = str(job.factors.get("judge") or "judge")
    return f"{base}[{','.join(f'{k}={job.factors[k]}' for k in keys)}]" if keys else base


def _varying(maps: Sequence[Mapping[str, str]]) -> list[str]:
    keys = sorted({k for m in maps for k in m})
    return [k for k in keys if len({m.get(k) for m in maps}) > 1]


def arm_names(jobs: Sequence[Job]) -> list[tuple[str | None, str]]:
    """Per job, the names of its clarified arm (None for an orig job) and of its orig arm.

    ``<system>-k<k>``, or ``<system>[<factors>]-k<k>`` with the factors other than the judge
    that vary across the sweep (``rules_scope[ua/persona=terse]-k1``); the orig arm is
    ``orig``, or ``orig[<factors>]`` when a setting factor other than the judge varies. Jobs
    that differ by their judge only name the same answers alike.
    """
    settings = [{k: v for k, v in j.factors.items() if not _judge_key(k)} for j in jobs]
    setting_keys = _varying(settings)
    keys = sorted({*setting_keys, *_varying([j.variant for j in jobs])})
    out: list[tuple[str | None, str]] = []
    for job, setting in zip(jobs, settings):
        both = {**job.variant, **setting}
        extra = ",".join(f"{k}={both.get(k)}" for k in keys)
        clarified = None if job.is_orig else f"{job.system}{f'[{extra}]' if extra else ''}-k{job.k}"
        orig = ",".join(f"{k}={setting.get(k)}" for k in setting_keys)
        out.append((clarified, f"orig[{orig}]" if orig else "orig"))
    return out


def judge_labels(jobs: Sequence[Job]) -> Mapping[str, ArmLabels]:
    """Judge -> (instance, arm) -> the labels it recorded (repeat 0); panel members as ``<judge>/<member>``."""
    out: dict[str, dict[ArmKey, Mapping[str, Label]]] = {}
    for job, (clarified, orig) in zip(jobs, arm_names(jobs)):
        name = judge_name(job)
        for r in job.records:
            if r.repeat:
                continue
            for arm_name, arm in ((clarified, r.clarified), (orig, r.orig)):
                if arm_name is None or arm is None or not arm.labels:
                    continue
                out.setdefault(name, {}).setdefault((r.id, arm_name), dict(arm.labels))
                for member, labels in arm.judge_members.items():
                    out.setdefault(f"{name}/{member}", {}).setdefault((r.id, arm_name), dict(labels))
    return out


def label_problems(
    labels: Sequence[HumanLabel], jobs: Sequence[Job], weights: Mapping[str, Mapping[str, int]]
) -> list[str]:
    """One line per label naming an instance, arm or nugget the sweep does not have (``line N: field: ...``)."""
    arms = {name for pair in arm_names(jobs) for name in pair if name is not None}
    ids = {r.id for j in jobs for r in j.records}
    problems = []
    for x in labels:
        where = f"line {x.line}" if x.line else "label"
        if x.instance not in ids:
            problems.append(f"{where}: instance: {x.instance!r} is not an instance of the sweep")
        elif x.arm not in arms:
            problems.append(f"{where}: arm: {x.arm!r} is not an arm of the sweep ({', '.join(sorted(arms))})")
        elif x.nugget not in weights.get(x.instance, {}):
            problems.append(f"{where}: nugget: {x.nugget!r} is not a gold nugget of {x.instance}")
    return problems


@dataclass(frozen=True)
class Agreement:
    """What the agreement tables are computed from."""

    humans: Mapping[str, ArmLabels]
    """Annotator -> (instance, arm) -> nugget -> label."""
    judges: Mapping[str, ArmLabels]
    weights: Mapping[str, Mapping[str, int]]
    """Instance -> gold nugget id -> weight (every nugget of the instance)."""
    clusters: Mapping[str, str]
    """Instance -> the cluster its labels are resampled with (itself when the sweep has none)."""

    @property
    def majority(self) -> ArmLabels:
        """Per arm and nugget, the majority of the annotators who labelled it."""
        given: dict[ArmKey, dict[str, list[Label]]] = {}
        for by_arm in self.humans.values():
            for key, labels in by_arm.items():
                for nugget, label in labels.items():
                    given.setdefault(key, {}).setdefault(nugget, []).append(label)
        return {key: {n: majority_label(v) for n, v in by_n.items()} for key, by_n in given.items()}

    def references(self) -> dict[str, ArmLabels]:
        """Each annotator, then their majority."""
        return {**self.humans, MAJORITY: self.majority}

    def score(self, key: ArmKey, labels: Mapping[str, Label]) -> float | None:
        """restore_score_100 of one arm's labels, None unless every gold nugget is labelled."""
        weights = self.weights.get(key[0], {})
        total = sum(weights.values())
        if total <= 0 or any(n not in labels for n in weights):
            return None
        return 100.0 * sum(w * CREDIT[labels[n]] for n, w in weights.items()) / total


def agreement_of(
    jobs: Sequence[Job], labels: Sequence[HumanLabel], weights: Mapping[str, Mapping[str, int]]
) -> Agreement:
    """The judges' recorded labels of ``jobs`` beside the human ``labels``."""
    humans: dict[str, dict[ArmKey, dict[str, Label]]] = {}
    for x in labels:
        humans.setdefault(x.annotator, {}).setdefault((x.instance, x.arm), {})[x.nugget] = x.label
    clustered = {i: c for j in jobs for i, c in j.clusters.items()}
    ids = {x.instance for x in labels}
    return Agreement(
        {a: dict(humans[a]) for a in sorted(humans)},
        judge_labels(jobs),
        weights,
        {i: clustered.get(i, i) for i in ids},
    )


def _pairs(a: ArmLabels, b: ArmLabels, clusters: Mapping[str, str]) -> tuple[list[int], list[int], list[str]]:
    xs, ys, cs = [], [], []
    for key in sorted(set(a) & set(b)):
        for nugget in sorted(set(a[key]) & set(b[key])):
            xs.append(ORDINAL[a[key][nugget]])
            ys.append(ORDINAL[b[key][nugget]])
            cs.append(clusters.get(key[0], key[0]))
    return xs, ys, cs


def _matrix(raters: Sequence[ArmLabels], clusters: Mapping[str, str]) -> tuple[np.ndarray, list[str]]:
    units = sorted({(key, n) for r in raters for key, labels in r.items() for n in labels})
    data = np.full((len(raters), len(units)), np.nan)
    for i, r in enumerate(raters):
        for u, (key, n) in enumerate(units):
            if key in r and n in r[key]:
                data[i, u] = ORDINAL[r[key][n]]
    return data, [clusters.get(key[0], key[0]) for key, _ in units]


def _pair_row(a: ArmLabels, b: ArmLabels, inp: Agreement, bootstrap: Resampling, weights: Weights) -> dict[str, float]:
    xs, ys, cs = _pairs(a, b, inp.clusters)
    kappa = kappa_ci(xs, ys, cs, bootstrap, weights=weights)
    data = np.array([xs, ys], dtype=float).reshape(2, -1)
    alpha = alpha_ci(data, cs, bootstrap)
    return {
        "n_labels": float(len(xs)),
        "n_clusters": float(kappa.n_clusters),
        "exact": float(np.mean([x == y for x, y in zip(xs, ys)])) if xs else NAN,
        "kappa": kappa.value,
        "kappa_low": kappa.low,
        "kappa_high": kappa.high,
        "alpha": alpha.value,
        "alpha_low": alpha.low,
        "alpha_high": alpha.high,
    }


def shift_row(judge: ArmLabels, human: ArmLabels, inp: Agreement, bootstrap: Resampling) -> dict[str, float]:
    """Judge score minus human score over the arms both scored, with its cluster bootstrap CI."""
    pairs = [(inp.score(k, judge[k]), inp.score(k, human[k]), k[0]) for k in sorted(set(judge) & set(human))]
    kept = [(j, h, i) for j, h, i in pairs if j is not None and h is not None]
    ci = cluster_bootstrap_ci(
        [p[0] for p in kept], [p[1] for p in kept], [inp.clusters.get(p[2], p[2]) for p in kept], bootstrap
    )
    return {
        "n_arms": float(len(kept)),
        "judge_score": float(np.mean([p[0] for p in kept])) if kept else NAN,
        "human_score": float(np.mean([p[1] for p in kept])) if kept else NAN,
        "shift": ci.mean,
        "shift_low": ci.low,
        "shift_high": ci.high,
    }


def ceiling_rows(inp: Agreement, bootstrap: Resampling, weights: Weights = "linear") -> pd.DataFrame:
    """Alpha among all annotators, then each pair of annotators' kappa and alpha."""
    names = list(inp.humans)
    data, clusters = _matrix([inp.humans[a] for a in names], inp.clusters)
    every = alpha_ci(data, clusters, bootstrap)
    rows: list[dict[str, Any]] = [
        {
            "annotators": "all (" + ", ".join(names) + ")",
            "n_labels": float(np.count_nonzero(~np.isnan(data))),
            "n_clusters": float(every.n_clusters),
            "alpha": every.value,
            "alpha_low": every.low,
            "alpha_high": every.high,
        }
    ]
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            rows.append(
                {"annotators": f"{a} vs {b}", **_pair_row(inp.humans[a], inp.humans[b], inp, bootstrap, weights)}
            )
    return pd.DataFrame(rows)


def agreement_rows(inp: Agreement, bootstrap: Resampling, weights: Weights = "linear") -> pd.DataFrame:
    """Per judge and reference (each annotator, the majority): kappa, alpha, exact agreement, score shift."""
    rows = []
    for judge, labels in inp.judges.items():
        for ref, human in inp.references().items():
            pair = _pair_row(labels, human, inp, bootstrap, weights)
            if pair["n_labels"]:
                rows.append({"judge": judge, "reference": ref, **pair, **shift_row(labels, human, inp, bootstrap)})
    return pd.DataFrame(rows)


def confusion_rows(inp: Agreement) -> pd.DataFrame:
    """Per judge and reference: counts of (human label, judge label), humans in rows, none to full."""
    rows = []
    for judge, labels in inp.judges.items():
        for ref, human in inp.references().items():
            xs, ys, _ = _pairs(human, labels, inp.clusters)
            if not xs:
                continue
            counts = confusion_counts(xs, ys)
            for h in ("none", "partial", "full"):
                row: dict[str, Any] = {"judge": judge, "reference": ref, "human": h}
                row.update({f"judge_{j}": int(counts[ORDINAL[h], ORDINAL[j]]) for j in ("none", "partial", "full")})
                rows.append(row)
    return pd.DataFrame(rows)


def _f(v: Any) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3f}"


def _ci(r: Mapping[str, Any], name: str, signed: bool = False) -> str:
    fmt = (lambda v: "–" if not math.isfinite(v) else f"{v:+.2f}") if signed else _f
    return f"{fmt(r[name])} [{fmt(r[f'{name}_low'])}, {fmt(r[f'{name}_high'])}]"


def agreement_report(inp: Agreement, bootstrap: Resampling, weights: Weights = "linear") -> list[Table]:
    """The ceiling, agreement and confusion tables (``human_*``)."""
    level = f"{bootstrap.confidence:.0%} CI"
    ceiling = ceiling_rows(inp, bootstrap, weights)
    shown = pd.DataFrame(
        [
            {
                "Annotators": r["annotators"],
                "n labels": int(r["n_labels"]),
                f"κ ({weights}) [{level}]": _ci(r, "kappa") if "kappa" in r and not _nan(r["kappa"]) else "–",
                f"α ordinal [{level}]": _ci(r, "alpha"),
            }
            for r in ceiling.to_dict("records")
        ]
    )
    tables = [Table("human_ceiling", "Agreement among the annotators (the ceiling a judge can reach)", ceiling, shown)]
    rows = agreement_rows(inp, bootstrap, weights)
    if rows.empty:
        return tables
    display = pd.DataFrame(
        [
            {
                "Judge": r["judge"],
                "vs": r["reference"],
                "n labels": int(r["n_labels"]),
                "exact": _f(r["exact"]),
                f"κ ({weights}) [{level}]": _ci(r, "kappa"),
                f"α ordinal [{level}]": _ci(r, "alpha"),
                "n arms": int(r["n_arms"]),
                f"score shift judge−human [{level}]": _ci(r, "shift", signed=True),
            }
            for r in rows.to_dict("records")
        ]
    )
    caption = (
        f"Judge vs people: weighted Cohen's κ and Krippendorff's α per nugget label, and the score shift "
        f"(judge − human restore_score_100); CIs resample {_unit(inp)}"
    )
    tables.append(Table("human_agreement", caption, rows, display))
    confusion = confusion_rows(inp)
    majority = confusion[confusion["reference"] == MAJORITY]
    tables.append(
        Table(
            "human_confusion",
            "Confusion of each judge's labels (columns) with the annotators' majority (rows)",
            confusion,
            majority.drop(columns="reference").rename(columns={f"judge_{x}": f"judge {x}" for x in LABELS}),
        )
    )
    return tables


def imported_report(source: Any, jobs: Sequence[Job], bootstrap: Resampling) -> list[Table]:
    """The ``human_*`` tables of a sweep dir whose labels were imported (``python -m cts.agreement``); else none."""
    from pathlib import Path

    from cts.data.human_labels import imported_labels

    found = imported_labels(source) if isinstance(source, (str, Path)) and Path(source).is_dir() else None
    if found is None:
        return []
    labels, weights = found
    return agreement_report(agreement_of(jobs, labels, weights), bootstrap)


def _nan(v: Any) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


def _unit(inp: Agreement) -> str:
    return "clusters (dataset.cluster_field)" if any(c != i for i, c in inp.clusters.items()) else "instances"
