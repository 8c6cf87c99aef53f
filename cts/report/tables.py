"""The table model (one :class:`Table` per paper table) and its Markdown, LaTeX and CSV writers."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from cts.report.jobs import NO_MODE
from cts.text.qtypes import QTYPES

log = logging.getLogger(__name__)

NAN = float("nan")


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


def _with_mode(display: pd.DataFrame, data: pd.DataFrame) -> pd.DataFrame:
    """``display`` with a ``mode`` column after its system column when the sweep has several modes.

    A sweep of one mode (the paper's batch) keeps the paper's table shape.
    """
    if "mode" in data and len(set(data["mode"]) - {NO_MODE}) > 1:
        display.insert(2, "mode", list(data["mode"]))
    return display


def scores_table(scores: pd.DataFrame) -> Table:
    """Tables 2/6: mean (delta vs orig), p50, p90 per system and k."""
    data = scores[["k", "system", "mode", "n", "mean", "delta", "p50", "p90"]]
    display = pd.DataFrame(
        {
            "k": data["k"],
            "System": data["system"],
            "n": data["n"].map(_count),
            "mean (Δ)": [
                _num(m) if mode == NO_MODE else f"{_num(m)} ({_signed(d)})"
                for mode, m, d in zip(data["mode"], data["mean"], data["delta"])
            ],
            "p50": data["p50"].map(_num),
            "p90": data["p90"].map(_num),
        }
    )
    display = _with_mode(display, data)
    caption = "Tables 2/6. restore_score_100 per system and budget k; Δ is the paired mean difference vs. orig."
    return Table("scores", caption, data.reset_index(drop=True), display.reset_index(drop=True))


_DELTA_COLS = ("k", "system", "mode", "n_paired", "delta", "delta_ci_low", "delta_ci_high")
_TEST_COLS = ("p_value", "p_holm", "p_test", "n_clusters", "design_effect", "cluster_field")
_PPI_COLS = (
    *("mean", "n_labelled", "score_ppi", "score_ppi_low", "score_ppi_high"),
    *("n_labelled_delta", "delta_ppi", "delta_ppi_low", "delta_ppi_high"),
)
_PPI_CAPTION = (
    "PPI: prediction-powered (PPI++) mean and Δ of the human restore_score_100, from the judge's scores of "
    "every instance corrected by its gap to people's labels on the n labelled instances (cts.report.ppi)."
)
_P_TESTS = {"bootstrap": "paired bootstrap", "permutation": "paired sign-flip permutation"}


def _p(v: float) -> str:
    return "–" if not math.isfinite(v) else ("<0.001" if v < 0.001 else f"{v:.3f}")


def delta_ci_table(scores: pd.DataFrame, confidence: float) -> Table:
    """Table 3: mean delta vs orig with its paired bootstrap CI, its p-value and the Holm-adjusted one.

    A job whose dataset names clusters (``dataset.cluster_field``) has a cluster bootstrap
    CI and p-value, and the table gains its cluster count and design effect.
    """
    extra = [c for c in _TEST_COLS if c in scores] + (list(_PPI_COLS) if "score_ppi" in scores else [])
    data = scores[scores["mode"] != NO_MODE][[*_DELTA_COLS, *extra]].reset_index(drop=True)
    pct = f"{confidence:.0%}"
    display = pd.DataFrame(
        {
            "k": data["k"],
            "System": data["system"],
            "n": data["n_paired"].map(_count),
            "mean Δ vs. orig": data["delta"].map(_signed),
            f"{pct} CI": [f"[{_num(lo)}, {_num(hi)}]" for lo, hi in zip(data["delta_ci_low"], data["delta_ci_high"])],
        }
    )
    if "p_holm" in data:
        display["p"], display["p (Holm)"] = data["p_value"].map(_p), data["p_holm"].map(_p)
    clustered = "cluster_field" in data and bool((data["cluster_field"] != "").any())
    if clustered:
        display["clusters"] = data["n_clusters"].map(_count)
        display["deff"] = data["design_effect"].map(lambda v: _num(v, 2))
    caption = _delta_caption(data, pct, clustered)
    if "score_ppi" in data:
        display, caption = _with_ppi(display, data, pct), f"{caption} {_PPI_CAPTION}"
    display = _with_mode(display, data)
    return Table("delta_ci", caption, data, display.reset_index(drop=True))


def _with_ppi(display: pd.DataFrame, data: pd.DataFrame, pct: str) -> pd.DataFrame:
    """Table 3's prediction-powered columns beside the judge-only ones."""

    def ci(name: str, fmt: Any) -> list[str]:
        return [
            f"{fmt(v)} [{_num(lo)}, {_num(hi)}]" if math.isfinite(v) else "–"
            for v, lo, hi in zip(data[name], data[f"{name}_low"], data[f"{name}_high"])
        ]

    out = display.copy()
    out["mean (judge)"] = data["mean"].map(_num)
    out["n labelled"] = data["n_labelled"].map(_count)
    out[f"mean PPI [{pct} CI]"] = ci("score_ppi", _num)
    out[f"Δ PPI [{pct} CI]"] = ci("delta_ppi", _signed)
    return out


def _delta_caption(data: pd.DataFrame, pct: str, clustered: bool) -> str:
    """Table 3's caption: which interval and which test each row used."""
    if not clustered:
        head = f"Table 3. Mean improvement over orig with paired bootstrap {pct} CIs."
    else:
        fields = ", ".join(f"`{f}`" for f in sorted(set(data["cluster_field"]) - {""}))
        rows = "" if bool((data["cluster_field"] != "").all()) else " (rows with a cluster count)"
        head = (
            f"Table 3. Mean improvement over orig with {pct} CIs from the paired cluster bootstrap by {fields}"
            f"{rows}: whole clusters resampled; deff = clustered / naive variance of the mean Δ."
        )
    if "p_holm" not in data:
        return head
    test = _P_TESTS.get(str(data["p_test"].iloc[0]) if len(data) else "bootstrap", "paired bootstrap")
    n = int(data["p_value"].notna().sum())
    return f"{head} p: two-sided {test} test of Δ = 0; p (Holm): adjusted over the {n} comparisons with orig."


def _rate_table(
    name: str,
    caption: str,
    diag: pd.DataFrame,
    cols: Mapping[str, str],
    fmt: Mapping[str, Callable[[Any], str]] | None = None,
) -> Table:
    fmt = fmt or {}
    data = diag[["k", "system", "mode", *cols]].reset_index(drop=True)
    display = _with_mode(pd.DataFrame({"k": data["k"], "System": data["system"]}), data)
    for col, title in cols.items():
        display[title] = data[col].map(fmt.get(col, _num))
    return Table(name, caption, data, display)


def known_cnt_table(diag: pd.DataFrame) -> Table:
    """Table 7: all_unknown rate and the distribution of known answers per instance."""
    kmax = int(diag["k"].max()) if len(diag) else 0
    cols = {"all_unknown_rate": "all_unknown"}
    cols.update({f"known_cnt_{i}": f"known_cnt={i}" for i in range(1, kmax + 1)})
    table = _rate_table(
        "all_unknown",
        "Table 7. Interaction-level UA unknown diagnostics: all_unknown = all k "
        "answers unknown; known_cnt = number of non-unknown answers.",
        diag,
        cols,
    )
    for i in range(1, kmax + 1):  # a budget of k cannot have more than k known answers
        table.display.loc[table.data["k"] < i, f"known_cnt={i}"] = "–"
    return table


def turn_table(diag: pd.DataFrame) -> Table:
    """Table 10: region-only count and unknown rate per (system, turn)."""
    rows = [
        {
            "k": row.k,
            "system": row.system,
            "mode": row["mode"],
            "turn": t,
            "region_only_count": row[f"region_only_count_t{t}"],
            "region_only_unknown_rate": row[f"region_only_unknown_rate_t{t}"],
        }
        for _, row in diag.iterrows()
        for t in range(1, int(row.k) + 1)
        if row[f"region_only_count_t{t}"] > 0  # like the paper, only turns with region-only questions
    ]
    data = pd.DataFrame(rows, columns=["k", "system", "mode", "turn", "region_only_count", "region_only_unknown_rate"])
    display = _with_mode(
        pd.DataFrame(
            {
                "k": data["k"],
                "(System, turn)": [f"({s}, {t})" for s, t in zip(data["system"], data["turn"])],
                "#region-only": data["region_only_count"].map(_count),
                "region-only unknown": data["region_only_unknown_rate"].map(_num),
            }
        ),
        data,
    )
    return Table(
        "turn_region_only", "Table 10. Turn-level UA unknown rate conditioned on region-only questions.", data, display
    )


def range_table(turns: pd.DataFrame) -> Table:
    """Table 8: range of region-only unknown rates across systems and turns, per k."""
    rows = []
    for k, group in turns.groupby("k"):
        rates = group["region_only_unknown_rate"].dropna()
        rows.append(
            {
                "k": k,
                "n_cells": float(len(rates)),
                "min": rates.min() if len(rates) else NAN,
                "max": rates.max() if len(rates) else NAN,
            }
        )
    data = pd.DataFrame(rows, columns=["k", "n_cells", "min", "max"])
    display = pd.DataFrame(
        {
            "Setting": [f"k={k}" for k in data["k"]],
            "Region-only unknown range": [f"{_num(a)}–{_num(b)}" for a, b in zip(data["min"], data["max"])],
            "(system, turn) cells": data["n_cells"].map(_count),
        }
    )
    return Table(
        "region_only_range",
        "Table 8. Range of UA unknown rates of region-only questions across systems and turns.",
        data,
        display,
    )


def unscored_table(diag: pd.DataFrame) -> Table:
    """Unscored scores per role and kind: the share of each job's arms (clarified and orig) lost that way.

    Only the (role, kind) columns some job has are shown; a sweep with none shows the total alone.
    """
    found = [c for c in diag.columns if c.startswith("unscored_rate_") and (diag[c].fillna(0) > 0).any()]
    cols = {"unscored_rate": "unscored", **{c: c.removeprefix("unscored_rate_") for c in found}}
    return _rate_table(
        "unscored",
        "Unscored rate per role and kind: share of the clarified and orig scores of each job that are missing "
        "because that role's reply was invalid after the re-asks (invalid_output), cut at its output cap "
        "(truncated) or refused by the provider (rejected).",
        diag,
        cols,
    )


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
        _rate_table(
            "ua_diagnostics",
            "Table 4. UA diagnostics: ua_unknown_rate = fraction of answers that are "
            "unknown; cq_region_rate = fraction of questions about region.",
            diag,
            {"ua_unknown_rate": "ua_unknown_rate", "cq_region_rate": "cq_region_rate"},
        ),
        _rate_table(
            "region_only",
            "Table 5. Region-only questions: count and UA unknown rate conditioned on region-only.",
            diag,
            {"region_only_count": "#region-only", "region_only_unknown_rate": "region-only unknown"},
            {"region_only_count": _count},
        ),
        known_cnt_table(diag),
        range_table(turns.data),
        turns,
        _rate_table(
            "qtype_unknown",
            "Question types: share of questions per type and UA unknown rate per type.",
            diag,
            qtype_cols,
        ),
        unscored_table(diag),
    ]


def markdown(df: pd.DataFrame) -> str:
    """A GitHub-style Markdown table of ``df``'s cells (as strings)."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in df.columns) + " |", "| " + " | ".join("---" for _ in df.columns) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def latex(table: Table) -> str:
    """A booktabs LaTeX table of the formatted cells (special characters escaped)."""
    styler = table.display.style.hide(axis="index").format(escape="latex")
    styler = styler.format_index(escape="latex", axis=1)
    tex = styler.to_latex(
        caption=table.caption.replace("_", r"\_").replace("%", r"\%"),
        label=f"tab:{table.name}",
        hrules=True,
        position_float="centering",
    )
    return tex.replace("Δ", r"$\Delta$").replace("–", "--")


def write_table(table: Table, out_dir: Path) -> list[Path]:
    """Write ``<name>.csv`` (numbers), ``<name>.md`` and ``<name>.tex`` (formatted)."""
    paths = [out_dir / f"{table.name}.{ext}" for ext in ("csv", "md", "tex")]
    table.data.to_csv(paths[0], index=False)
    paths[1].write_text(f"**{table.caption}**\n\n{markdown(table.display)}", encoding="utf-8")
    paths[2].write_text(latex(table), encoding="utf-8")
    return paths
