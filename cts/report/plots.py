"""Report plots: score vs k, UA unknown rate vs region-question rate."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pandas as pd

from cts.report.jobs import ORIG

log = logging.getLogger(__name__)


def figure(figsize: tuple[float, float], ncols: int = 1) -> Any:
    """A figure with ``ncols`` axes in a row and fixed margins, drawn by the file-only Agg canvas.

    The margins are fixed in inches (room for the axis labels, tick labels and a title
    line), not found by a layout engine: constrained layout measured every text again at
    each save, half of the report's plotting time. No pyplot: its import (about 0.1 s more
    than the figure's), its global figure manager and its backend selection are not
    needed to write PNG files. matplotlib is imported on first use.

    Returns:
        The figure and its axes (one, or a list of ``ncols``).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = figsize
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)  # attaches itself as fig.canvas: savefig draws with Agg
    left, right, bottom, top, gap = _MARGINS_IN
    axis_width = (width - left - right - gap * (ncols - 1)) / ncols
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        bottom=bottom / height,
        top=1 - top / height,
        wspace=gap / axis_width,
    )
    return fig, fig.subplots(1, ncols)


_MARGINS_IN = (0.75, 0.2, 0.6, 0.4, 0.85)
"""Left, right, bottom, top and between axes, in inches."""


def plot_scores(scores: pd.DataFrame, path: Path) -> Path:
    """Mean score (left) and delta vs orig (right) against k, one line per clarifier, CI bars."""
    fig, (left, right) = figure((11, 4.2), ncols=2)
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
    for ax, ylabel, title in (
        (left, "mean restore_score_100", "Score vs. clarification budget"),
        (right, "Δ vs. orig (paired)", "Improvement over orig"),
    ):
        ax.set_xticks(ks)
        ax.set_xlabel("k (questions)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} (95% bootstrap CI)")
        ax.grid(alpha=0.3)
    left.legend(fontsize="small", loc="best")
    fig.savefig(path, dpi=120)
    return path


def plot_unknown_vs_region(diag: pd.DataFrame, path: Path) -> Path:
    """UA unknown rate against the share of region questions, one colour per clarifier."""
    fig, ax = figure((6.5, 4.8))
    for system, rows in diag.sort_values("k").groupby("system", sort=True):
        (line,) = ax.plot(
            rows["cq_region_rate"],
            rows["ua_unknown_rate"],
            marker="o",
            markersize=8,
            linewidth=1,
            alpha=0.8,
            label=system,
        )
        ax.scatter(
            rows["cq_region_rate"],
            rows["region_only_unknown_rate"],
            s=60,
            marker="^",
            facecolors="none",
            edgecolors=line.get_color(),
        )
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
    return path


def _annotate_ks(ax: Any, rows: pd.DataFrame) -> None:
    """Label each point with its k (points that coincide share one label)."""
    points: dict[tuple[float, float], list[str]] = {}
    for x, y, k in zip(rows["cq_region_rate"], rows["ua_unknown_rate"], rows["k"]):
        if math.isfinite(x) and math.isfinite(y):
            points.setdefault((round(x, 3), round(y, 3)), []).append(str(k))
    for (x, y), ks in points.items():
        ax.annotate(f"k={','.join(ks)}", (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
