"""Tables of the realism audit, the ask-or-not check and the region pattern: rows, Markdown, files."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cts.realism.audit import AuditResult
from cts.realism.metrics import confusion, human_distance, score_pair
from cts.realism.pattern import PAPER
from cts.stats.agreement import Estimate

__all__ = [
    "AUDIT_COLUMNS",
    "audit_rows",
    "cell",
    "comparison_table",
    "confusion_table",
    "gate_table",
    "markdown",
    "pattern_table",
    "write_rows",
]

AUDIT_COLUMNS: tuple[str, ...] = (
    "kappa",
    "agreement",
    "ua_answer_rate",
    "human_answer_rate",
    "over_answer",
    "under_answer",
    "content_f1",
    "ua_tokens",
    "human_tokens",
    "ua_leak_rate",
    "human_leak_rate",
)


def cell(e: Estimate, digits: int = 3) -> str:
    """``value [low, high]`` (``–`` for an undefined value)."""
    if not math.isfinite(e.value):
        return "–"
    if not (math.isfinite(e.low) and math.isfinite(e.high)):
        return f"{e.value:.{digits}f}"
    return f"{e.value:.{digits}f} [{e.low:.{digits}f}, {e.high:.{digits}f}]"


def markdown(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A Markdown table of ``rows`` over ``columns`` (floats to 3 decimals)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c, "")) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "–" if not math.isfinite(v) else f"{v:.3f}"
    return str(v)


def audit_rows(result: AuditResult) -> list[dict[str, Any]]:
    """One row per statistic: value, interval, units and clusters (the audit's CSV artifact)."""
    return [
        {"metric": name, "value": e.value, "low": e.low, "high": e.high, "n": e.n, "n_clusters": e.n_clusters}
        for name, e in result.metrics.items()
    ]


def comparison_table(results: Mapping[str, AuditResult]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per UA (its label), every statistic as ``value [low, high]``, the distance to people; the nearest first flagged.

    Returns:
        The rows and the columns to show.
    """
    rows = []
    distances = {label: human_distance(r.metrics) for label, r in results.items()}
    nearest = min(distances, key=lambda k: distances[k]) if distances else None
    for label, r in results.items():
        row: dict[str, Any] = {"ua": label + (" (nearest)" if label == nearest else ""), "pairs": len(r.pairs)}
        row.update({c: cell(r.metrics[c]) for c in AUDIT_COLUMNS})
        row["distance"] = distances[label]
        row["failed"] = sum(r.failures.values())
        row["ua_seconds"] = round(r.seconds, 1)
        rows.append(row)
    return rows, ["ua", "pairs", *AUDIT_COLUMNS, "distance", "failed", "ua_seconds"]


def confusion_table(result: AuditResult) -> list[dict[str, Any]]:
    """The answerability confusion matrix: rows the person, columns the UA."""
    scores = [score_pair(p) for p in result.pairs]
    m = confusion([s.human_informative for s in scores], [s.ua_informative for s in scores])
    names = ("no answer", "informative")
    return [
        {"person \\ UA": names[i], "UA: no answer": int(m[i, 0]), "UA: informative": int(m[i, 1])} for i in range(2)
    ]


def gate_table(results: Mapping[str, Mapping[str, Estimate]]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per gate: requests, AUC, accuracy and ask rate with intervals, people's need rate."""
    rows = []
    for gate, m in results.items():
        rows.append(
            {
                "gate": gate,
                "requests": m["auc"].n,
                "topics": m["auc"].n_clusters,
                "auc": cell(m["auc"]),
                "accuracy": cell(m["accuracy"]),
                "ask_rate": cell(m["ask_rate"]),
                "need_rate": cell(m["need_rate"]),
            }
        )
    return rows, ["gate", "requests", "topics", "auc", "accuracy", "ask_rate", "need_rate"]


PATTERN_COLUMNS: tuple[str, ...] = (
    "system",
    "n_facets",
    "ua_unknown_rate",
    "cq_region_rate",
    "n_region_only",
    "region_only_unknown",
    "other_unknown",
    "region_only_unknown_all_k",
    "other_unknown_all_k",
    "all_unknown_k1",
    "all_unknown_k2",
    "all_unknown_k3",
)


def pattern_table(rows: Mapping[str, Mapping[str, float]]) -> list[dict[str, Any]]:
    """The systems' rows, then the paper's ranges (Tables 4, 5, 7) as the last row."""
    out = [
        {"system": name, **{k: (int(v) if k.startswith("n_") and np.isfinite(v) else v) for k, v in r.items()}}
        for name, r in rows.items()
    ]
    return out + [{"system": "paper (7 clarifiers, n=518, k=1; Table 4/5/7)", **PAPER}]


def write_rows(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """``rows`` as CSV (``.csv``) or JSON (otherwise), NaN as empty / null."""
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()} for r in rows]
    if path.suffix == ".csv":
        with path.open("w", encoding="utf-8", newline="") as f:
            cols = list(dict.fromkeys(k for r in clean for k in r))
            writer = csv.DictWriter(f, fieldnames=cols)
            writer.writeheader()
            writer.writerows(clean)
    else:
        path.write_text(json.dumps(clean, indent=2, ensure_ascii=False), encoding="utf-8")
    return path
