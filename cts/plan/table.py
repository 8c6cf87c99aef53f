"""The forecast as tables: Markdown for people, CSV for tools, and forecast against the actual run.

A number the planner does not know is never printed as 0: an unknown job's cells read
``unknown`` and its note says why, an incomplete sweep total reads ``>= ...`` (the known jobs'
part), a job with one run in the slice shows its expected value without an interval.

A sweep that batches roles (``services.llm.batch.roles``) has two more columns: ``usd (batch)``
after ``usd`` (its batched roles at batch prices) and ``wall_s (batch)`` after ``wall_s`` (the
live part's wall time plus one batch turnaround per batched stage in a row, each up to the
batch window: no expected value, as how long a batch takes is not known before it runs).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from cts.plan.forecast import Interval, JobForecast

__all__ = [
    "BATCH_QUANTITIES",
    "QUANTITIES",
    "comparison_markdown",
    "forecast_csv",
    "forecast_markdown",
    "note",
    "quantities",
    "write_tables",
]

QUANTITIES = ("calls", "tokens_in", "tokens_out", "tokens_reasoning", "usd", "wall_s")
"""The forecast's columns, in order (``calls``: requests to send; cached calls are free)."""
BATCH_QUANTITIES = (
    "calls",
    "tokens_in",
    "tokens_out",
    "tokens_reasoning",
    "usd",
    "usd (batch)",
    "wall_s",
    "wall_s (batch)",
)
"""The columns of a sweep that batches roles."""
USD, WALL = ("usd", "usd (batch)"), ("wall_s", "wall_s (batch)")


def quantities(sweep: JobForecast) -> tuple[str, ...]:
    """The sweep's columns: :data:`BATCH_QUANTITIES` when it batches a role, else :data:`QUANTITIES`."""
    return QUANTITIES if sweep.batch is None else BATCH_QUANTITIES


def _interval(f: JobForecast, quantity: str) -> Interval | None:
    if quantity == "usd (batch)":  # a job that batches no role pays its live price
        return f.batch.usd if f.batch else f.usd
    if quantity == "calls (live)":
        return f.batch.calls_live if f.batch else f.calls
    if quantity == "wall_s (batch)":
        return f.batch.wall_live if f.batch else None
    value: Interval | None = getattr(f, quantity)
    return value


def _unpriced(f: JobForecast, quantity: str) -> tuple[str, ...]:
    """The models without a price (and batched roles without a known batch price) that a USD leaves out."""
    if quantity == "usd (batch)" and f.batch:
        return f.batch.unpriced
    return f.unpriced if quantity in USD else ()


def _known(f: JobForecast, quantity: str) -> bool:
    """Whether the quantity is known: not for an unknown job, an unpriced USD, an unforecast wall time."""
    if f.unknown or _interval(f, quantity) is None:
        return False
    return not _unpriced(f, quantity)


def _number(quantity: str, value: float) -> str:
    if quantity in USD:
        return f"{value:.4f}"
    if quantity in WALL:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def _text(f: JobForecast, quantity: str, iv: Interval) -> str:
    expected = _number(quantity, iv.expected)
    no_interval = f.no_interval and quantity not in WALL
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
        return "unknown" if f.name == "sweep" or quantity not in WALL else ""
    text = _text(f, quantity, iv)
    if unpriced := _unpriced(f, quantity):
        return f"unknown (no price: {', '.join(unpriced)}; priced models ${text})"
    text = ("$" + text) if quantity in USD else text
    if quantity == "wall_s (batch)" and f.batch:
        text = f"{text} + {turnarounds(f)}: at most {_number(quantity, f.batch.wall_high or 0.0)}"
    return f">= {text}" if f.incomplete else text


def turnarounds(f: JobForecast) -> str:
    """``N batch turnarounds (each up to the 24h window)``: what the batch mode's wall time adds to its live part."""
    assert f.batch is not None
    b = f.batch
    n = f"{b.turnarounds} batch turnaround{'' if b.turnarounds == 1 else 's'}"
    if b.waves > 1:
        return f"{n} ({b.shape.stages} per run x {b.waves} rounds of runs in flight; each up to the {b.shape.window} window)"
    return f"{n} (each up to the {b.shape.window} window)"


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
    columns = quantities(sweep)
    head = ["job", "runs", "paid", *columns, "note"]
    lines = [
        f"Forecast (expected [low-high], {confidence:.0%} interval; cached calls are free)",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for f in [*jobs, sweep]:
        name = f"**{f.name}**" if f is sweep else f.name
        row = [name, str(f.n_total), str(f.n_paid), *(cell(f, q) for q in columns), note(f)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def forecast_csv(jobs: Sequence[JobForecast], sweep: JobForecast) -> str:
    """Long form: ``job, runs, paid, quantity, low, expected, high, note`` (empty numbers where unknown)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["job", "runs", "paid", "quantity", "low", "expected", "high", "note"])
    for f in [*jobs, sweep]:
        for q in quantities(sweep):
            iv = _interval(f, q)
            if f.unknown or iv is None:
                if f.name == "sweep" or q not in WALL:
                    writer.writerow([f.name, f.n_total, f.n_paid, q, "", "", "", note(f) or "unknown"])
                continue
            unpriced = _unpriced(f, q)
            extra = "unknown: no price for " + " ".join(unpriced) + "; numbers: the priced part" if unpriced else ""
            text = "; ".join(x for x in (extra, note(f)) if x)
            low, high = ("", "") if f.no_interval and q not in WALL else (f"{iv.low:.6g}", f"{iv.high:.6g}")
            expected = f"{iv.expected:.6g}"
            if q == "wall_s (batch)" and f.batch:  # no expected value: how long a batch takes is not known
                live = f"the live part {_text(f, q, iv)} + {turnarounds(f)}"
                expected, high, text = "", f"{f.batch.wall_high or 0.0:.6g}", "; ".join(x for x in (live, text) if x)
            writer.writerow([f.name, f.n_total, f.n_paid, q, low, expected, high, text])
    return out.getvalue()


COMPARED = {"calls": "calls (live)", "usd": "usd (batch)", "wall_s": "wall_s (batch)"}
"""With batched roles, what an actual figure is compared with: the live requests, the batch prices, the batch mode's time."""


def comparison_markdown(sweep: JobForecast, actual: Mapping[str, float]) -> str:
    """The sweep's forecast beside what it did: each quantity, whether the actual lies within the interval.

    A sweep that batched roles sent their requests in batches and paid their batch prices: its
    actual requests, USD and wall time are set beside the forecast of the batch mode.
    """
    lines = ["Forecast against the actual run", "", "| quantity | forecast | actual | within |", "|---|---|---|---|"]
    for name in QUANTITIES:
        value = actual.get(name)
        if value is None:
            continue
        q = COMPARED.get(name, name) if sweep.batch else name
        iv = _interval(sweep, q)
        if q == "wall_s (batch)" and iv is not None and sweep.batch:
            iv = Interval(iv.low, iv.expected, sweep.batch.wall_high or iv.high)
        full = _known(sweep, q) and not sweep.incomplete and not (sweep.no_interval and q not in WALL)
        within = ("yes" if iv is not None and iv.contains(value) else "no") if full else "n/a"
        shown = f"${value:.4f}" if q in USD else _number(q, value)
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
