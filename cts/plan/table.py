"""The forecast as tables: Markdown for people, CSV for tools, and forecast against the actual run."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from cts.plan.forecast import Interval, JobForecast

__all__ = ["QUANTITIES", "comparison_markdown", "forecast_csv", "forecast_markdown", "write_tables"]

QUANTITIES = ("calls", "tokens_in", "tokens_out", "tokens_reasoning", "usd", "wall_s")
"""The forecast's columns, in order (``calls``: requests to send; cached calls are free)."""


def _interval(f: JobForecast, quantity: str) -> Interval:
    return getattr(f, quantity)


def _known(f: JobForecast, quantity: str) -> bool:
    """Whether the quantity is known: the USD of a job that calls a model without a price is not."""
    return not (quantity == "usd" and f.unpriced)


def _number(quantity: str, value: float) -> str:
    if quantity == "usd":
        return f"{value:.4f}"
    if quantity == "wall_s":
        return f"{value:.1f}"
    return f"{value:,.0f}"


def cell(f: JobForecast, quantity: str) -> str:
    """``expected [low-high]``; ``unknown`` for the USD of a job that calls a model without a price.

    An unknown USD still shows what the priced models' calls cost: never a plain $0.
    """
    iv = _interval(f, quantity)
    text = f"{_number(quantity, iv.expected)} [{_number(quantity, iv.low)}-{_number(quantity, iv.high)}]"
    if not _known(f, quantity):
        return f"unknown (no price: {', '.join(f.unpriced)}; priced models ${text})"
    return ("$" + text) if quantity == "usd" else text


def forecast_markdown(jobs: Sequence[JobForecast], sweep: JobForecast, confidence: float) -> str:
    """One row per job and one for the sweep: each quantity as ``expected [low-high]``.

    ``runs`` are instances x repeats (each repeat of an instance is a run with its own calls),
    ``paid`` the runs whose calls are not already cached.
    """
    head = ["job", "runs", "paid", *QUANTITIES]
    lines = [
        f"Forecast (expected [low-high], {confidence:.0%} interval; cached calls are free)",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for f in [*jobs, sweep]:
        name = f"**{f.name}**" if f is sweep else f.name
        lines.append("| " + " | ".join([name, str(f.n_total), str(f.n_paid), *(cell(f, q) for q in QUANTITIES)]) + " |")
    return "\n".join(lines) + "\n"


def forecast_csv(jobs: Sequence[JobForecast], sweep: JobForecast) -> str:
    """Long form: ``job, quantity, low, expected, high`` (empty numbers and ``unknown`` for an unpriced USD)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["job", "runs", "paid", "quantity", "low", "expected", "high", "note"])
    for f in [*jobs, sweep]:
        for q in QUANTITIES:
            iv = _interval(f, q)
            note = (
                "" if _known(f, q) else "unknown: no price for " + " ".join(f.unpriced) + "; numbers: the priced part"
            )
            writer.writerow(
                [f.name, f.n_total, f.n_paid, q, f"{iv.low:.6g}", f"{iv.expected:.6g}", f"{iv.high:.6g}", note]
            )
    return out.getvalue()


def comparison_markdown(sweep: JobForecast, actual: Mapping[str, float]) -> str:
    """The sweep's forecast beside what it did: each quantity, whether the actual lies within the interval."""
    lines = ["Forecast against the actual run", "", "| quantity | forecast | actual | within |", "|---|---|---|---|"]
    for q in QUANTITIES:
        iv = _interval(sweep, q)
        value = actual.get(q)
        if value is None:
            continue
        within = ("yes" if iv.contains(value) else "no") if _known(sweep, q) else "n/a"
        shown = f"${value:.4f}" if q == "usd" else _number(q, value)
        lines.append(f"| {q} | {cell(sweep, q)} | {shown} | {within} |")
    return "\n".join(lines) + "\n"


def write_tables(out_dir: Path, files: Mapping[str, str]) -> list[Path]:
    """Write ``name -> text`` into ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in files.items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
