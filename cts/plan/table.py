"""The forecast as tables: Markdown for people, CSV for tools, and forecast against the actual run.

A number the planner does not know is never printed as 0: an unknown job's cells read
``unknown`` and its note says why, an incomplete sweep total reads ``>= ...`` (the known jobs'
part), a job with one run in the slice shows its expected value without an interval.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from cts.plan.forecast import Interval, JobForecast

__all__ = ["QUANTITIES", "comparison_markdown", "forecast_csv", "forecast_markdown", "note", "write_tables"]

QUANTITIES = ("calls", "tokens_in", "tokens_out", "tokens_reasoning", "usd", "wall_s")
"""The forecast's columns, in order (``calls``: requests to send; cached calls are free)."""


def _interval(f: JobForecast, quantity: str) -> Interval | None:
    value: Interval | None = getattr(f, quantity)
    return value


def _known(f: JobForecast, quantity: str) -> bool:
    """Whether the quantity is known: not for an unknown job, an unpriced USD, an unforecast wall time."""
    if f.unknown or _interval(f, quantity) is None:
        return False
    return not (quantity == "usd" and f.unpriced)


def _number(quantity: str, value: float) -> str:
    if quantity == "usd":
        return f"{value:.4f}"
    if quantity == "wall_s":
        return f"{value:.1f}"
    return f"{value:,.0f}"


def _text(f: JobForecast, quantity: str, iv: Interval) -> str:
    expected = _number(quantity, iv.expected)
    no_interval = f.no_interval and quantity != "wall_s"
    spread = " [no interval]" if no_interval else f" [{_number(quantity, iv.low)}-{_number(quantity, iv.high)}]"
    return expected + spread


def cell(f: JobForecast, quantity: str) -> str:
    """``expected [low-high]``, or what stands in for a number the planner does not know.

    ``unknown`` for an unknown job (its note says why) or a wall time not forecast; for the USD of
    a job that calls a model without a price, ``unknown`` with the priced models' part beside it;
    ``>=`` before an incomplete sweep's total (the known jobs' part). Never a plain $0.
    """
    iv = _interval(f, quantity)
    if f.unknown or iv is None:
        return "unknown" if f.name == "sweep" or quantity != "wall_s" else ""
    text = _text(f, quantity, iv)
    if quantity == "usd" and f.unpriced:
        return f"unknown (no price: {', '.join(f.unpriced)}; priced models ${text})"
    text = ("$" + text) if quantity == "usd" else text
    return f">= {text}" if f.incomplete else text


def note(f: JobForecast) -> str:
    """What a reader must know of a row: why it is unknown, what an incomplete total covers, a slice cut short."""
    parts = [f"unknown: {f.unknown}"] if f.unknown else []
    if f.incomplete:
        parts.append(
            f"incomplete: {len(f.incomplete)} job(s) unknown ({', '.join(f.incomplete)}), not in these numbers"
        )
    if f.no_interval:
        parts.append(f"no interval: {f.no_interval}")
    parts += [*f.notes, *([f"wall_s: {f.wall_note}"] if f.wall_note else [])]
    return "; ".join(parts)


def forecast_markdown(jobs: Sequence[JobForecast], sweep: JobForecast, confidence: float) -> str:
    """One row per job and one for the sweep: each quantity as ``expected [low-high]``, and a note.

    ``runs`` are instances x repeats (each repeat of an instance is a run with its own calls),
    ``paid`` the runs whose calls are not already cached; the wall time is the sweep's (its jobs
    share one schedule).
    """
    head = ["job", "runs", "paid", *QUANTITIES, "note"]
    lines = [
        f"Forecast (expected [low-high], {confidence:.0%} interval; cached calls are free)",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for f in [*jobs, sweep]:
        name = f"**{f.name}**" if f is sweep else f.name
        row = [name, str(f.n_total), str(f.n_paid), *(cell(f, q) for q in QUANTITIES), note(f)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def forecast_csv(jobs: Sequence[JobForecast], sweep: JobForecast) -> str:
    """Long form: ``job, runs, paid, quantity, low, expected, high, note`` (empty numbers where unknown)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["job", "runs", "paid", "quantity", "low", "expected", "high", "note"])
    for f in [*jobs, sweep]:
        for q in QUANTITIES:
            iv = _interval(f, q)
            if f.unknown or iv is None:
                if f.name == "sweep" or q != "wall_s":
                    writer.writerow([f.name, f.n_total, f.n_paid, q, "", "", "", note(f) or "unknown"])
                continue
            extra = (
                "" if _known(f, q) else "unknown: no price for " + " ".join(f.unpriced) + "; numbers: the priced part"
            )
            text = "; ".join(x for x in (extra, note(f)) if x)
            low, high = ("", "") if f.no_interval and q != "wall_s" else (f"{iv.low:.6g}", f"{iv.high:.6g}")
            writer.writerow([f.name, f.n_total, f.n_paid, q, low, f"{iv.expected:.6g}", high, text])
    return out.getvalue()


def comparison_markdown(sweep: JobForecast, actual: Mapping[str, float]) -> str:
    """The sweep's forecast beside what it did: each quantity, whether the actual lies within the interval."""
    lines = ["Forecast against the actual run", "", "| quantity | forecast | actual | within |", "|---|---|---|---|"]
    for q in QUANTITIES:
        value = actual.get(q)
        if value is None:
            continue
        iv = _interval(sweep, q)
        full = _known(sweep, q) and not sweep.incomplete and not (sweep.no_interval and q != "wall_s")
        within = ("yes" if iv is not None and iv.contains(value) else "no") if full else "n/a"
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
