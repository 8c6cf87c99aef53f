"""What makes the report cheaper at the end of a sweep keeps its output: plots, gates, the warm-up."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cts.core.contracts import Decision
from cts.core.records import ArmResult
from cts.report import beyond, plots
from cts.report.gate_evaluation import decide_all, evaluate_gate, evaluate_gates
from cts.report.jobs import load_jobs
from cts.report.rows import diagnostic_rows, score_rows
from cts.roles.gates import AlwaysGate, NeverGate, OracleGate
from cts.stats import Resampling
from tests.report.fakes import ORIG_SCORES, make_records, write_job

REPO = Path(__file__).resolve().parents[2]


def small_sweep(root: Path) -> Path:
    write_job(root, "none", 1, make_records(1, ORIG_SCORES))
    for k in (1, 2):
        answers = [["known"] * k, ["unknown"] * k, ["known"] * k, ["unknown"] * k]
        write_job(root, "rules_scope", k, make_records(k, (20, 25, 40, 45), [("scope",)] * k, answers))
        write_job(root, "rules_region", k, make_records(k, (10, 20, 30, None), [("region",)] * k, answers))
    return root


def _overflow(fig: Any) -> list[str]:
    """The axes of ``fig`` whose labels, ticks or title reach past the figure's edges (in pixels, 1 px of slack)."""
    renderer = fig.canvas.get_renderer()
    edge = fig.bbox
    out = []
    for ax in fig.axes:
        box = ax.get_tightbbox(renderer)
        if box.x0 < edge.x0 - 1 or box.y0 < edge.y0 - 1 or box.x1 > edge.x1 + 1 or box.y1 > edge.y1 + 1:
            out.append(f"{ax.get_title()!r}: {box.bounds} outside {edge.bounds}")
    return out


def test_the_plots_fixed_margins_hold_their_labels_ticks_and_titles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each plot keeps every label, tick label and title inside the picture (no layout engine places them)."""
    jobs, boot = load_jobs(small_sweep(tmp_path / "sweep")), Resampling(200)
    scores, diag = score_rows(jobs, boot), diagnostic_rows(jobs)
    gates: dict[str, Any] = {"always": AlwaysGate(), "never": NeverGate(), "oracle": OracleGate()}
    front = beyond.frontier_rows(beyond.gating_rows(jobs, boot, gates))
    scores = scores.assign(mean=scores["mean"] * 2.2, mean_ci_high=scores["mean_ci_high"] * 2.2)  # 3-digit ticks
    made: list[Any] = []
    real = plots.figure

    def keep(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    def draw(tag: str) -> list[Path]:
        made.clear()
        paths = [tmp_path / f"{tag}{i}.png" for i in range(3)]
        plots.plot_scores(scores, paths[0])
        plots.plot_unknown_vs_region(diag, paths[1])
        beyond.plot_frontier(front, paths[2], "cost_per_instance", "cost", "Cost-quality frontier")
        return paths

    monkeypatch.setattr(plots, "figure", keep)
    monkeypatch.setattr(beyond, "figure", keep)
    pictures = draw("fixed")
    assert [p.stat().st_size > 10_000 for p in pictures] == [True] * 3
    assert [len(fig.axes) for fig, _ in made] == [2, 1, 1]
    assert [_overflow(fig) for fig, _ in made] == [[], [], []]
    monkeypatch.setattr(plots, "_MARGINS_IN", (0.05, 0.05, 0.05, 0.05, 0.1))  # the check sees labels cut off
    draw("tight")
    assert all(_overflow(fig) for fig, _ in made)


def test_one_event_loop_for_every_gate_decides_what_one_loop_per_gate_did(tmp_path: Path) -> None:
    jobs = [j for j in load_jobs(small_sweep(tmp_path / "sweep")) if not j.is_orig]
    gates = [AlwaysGate(), NeverGate(), OracleGate()] * len(jobs)
    sets = [j.records for j in jobs for _ in range(3)]
    together = evaluate_gates(sets, gates, Resampling(300))
    assert together == [evaluate_gate(rs, g, Resampling(300)) for rs, g in zip(sets, gates)]
    assert [list(d) for _, d in together] == [[r.id for r in rs if r.score is not None] for rs in sets]


def test_query_gates_decide_each_instance_once_with_at_most_the_concurrency_in_flight(tmp_path: Path) -> None:
    records = [r for j in load_jobs(small_sweep(tmp_path / "sweep")) for r in j.records]
    seen: list[str] = []
    in_flight = [0, 0]  # now, peak

    class SlowGate:
        async def decide(self, blurred_query: str) -> Decision:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
            await asyncio.sleep(0.001)
            seen.append(blurred_query)
            in_flight[0] -= 1
            return Decision(ask=len(seen) % 2 == 0)

    unique = list({r.id: r for r in records}.values())
    decided = asyncio.run(decide_all(unique, SlowGate(), concurrency=3))
    assert list(decided) == [r.id for r in unique] and len(seen) == len(unique)
    assert in_flight[1] == 3

    class ByQuery:
        async def decide(self, blurred_query: str) -> Decision:
            await asyncio.sleep(0.002 if blurred_query == "first" else 0.0)  # the first one finishes last
            return Decision(ask=blurred_query == "last")

    twice = [replace(unique[0], orig=ArmResult(query=q, score=1.0)) for q in ("first", "last")]
    assert asyncio.run(decide_all(twice, ByQuery())) == {unique[0].id: Decision(ask=True)}  # the last record's


def test_a_report_draws_its_plots_without_pyplot(tmp_path: Path) -> None:
    """The report's plots use a Figure and the Agg canvas (in a fresh interpreter): pyplot is never imported."""
    sweep = small_sweep(tmp_path / "sweep")
    code = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        import cts.report
        from cts.stats import Resampling
        settings = cts.report.ReportSettings(Resampling(200))
        result = cts.report.build_sweep_report(Path({str(sweep)!r}), Path({str(tmp_path / "out")!r}), settings=settings)
        print(json.dumps([result.ok, "matplotlib.figure" in sys.modules, "matplotlib.pyplot" in sys.modules]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    ok, figure, pyplot = json.loads(out.stdout.strip().splitlines()[-1])
    assert ok and figure and not pyplot
