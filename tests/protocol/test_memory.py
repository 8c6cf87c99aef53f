"""Flat memory: lazy instance scheduling, and a kept record view that loses nothing the metrics read."""

from __future__ import annotations

import asyncio
import math
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cts._util.aio import bounded
from cts.core.records import ArmResult, Record, read_records
from cts.protocol.job_files import RECORDS_FILE, DirRecords
from cts.protocol.metrics import metric_view, summarize
from cts.protocol.pipeline import run_instances
from cts.protocol.settings import InstanceSettings, JobSettings
from cts.protocol.spend import SpendLimit, spend_metrics, within_spend_limit
from cts.stats import Resampling
from tests.conftest import REPO


def test_bounded_runs_at_most_limit_and_starts_jobs_lazily() -> None:
    started: list[int] = []
    running, peak = 0, 0

    async def job(i: int) -> int:
        nonlocal running, peak
        started.append(i)
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.001 * (i % 3))
        running -= 1
        return i

    async def main() -> list[int]:
        return [r async for r in bounded((job(i) for i in range(50)), 4)]

    assert sorted(asyncio.run(main())) == list(range(50)) and peak == 4


def test_bounded_yields_finished_results_then_raises_and_cancels_the_rest() -> None:
    cancelled: list[int] = []

    async def job(i: int) -> int:
        try:
            await asyncio.sleep({0: 0, 1: 0, 2: 5}[i])
        except asyncio.CancelledError:
            cancelled.append(i)
            raise
        if i == 1:
            raise RuntimeError("spend limit")
        return i

    async def main() -> list[int]:
        got: list[int] = []
        with pytest.raises(RuntimeError, match="spend limit"):
            async for r in bounded((job(i) for i in range(3)), 3):
                got.append(r)
        return got

    assert asyncio.run(main()) == [0] and cancelled == [2]


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def test_metrics_of_the_kept_view_equal_those_of_the_full_records(services, tmp_path: Path) -> None:
    from cts.compose.app import ConfiguredTask
    from cts.demo import load_demo
    from cts.tasks.evaluate import build_roles

    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose("config", overrides=["experiment=offline", "k=2"])
    data = load_demo(services.corpus, services.index, services.cache_dir, n=200)
    instances = list(data.instances)[:40]
    kept, stop = asyncio.run(
        run_instances(
            instances,
            data.gold,
            build_roles(ConfiguredTask(cfg, services)),
            InstanceSettings(2),
            JobSettings(tmp_path, progress=False, keep=metric_view),
        )
    )
    on_disk = {r.id: r for r in read_records(tmp_path / "records.jsonl")}
    full = [on_disk[i.id] for i in instances]  # the job's order (the file has completion order)
    assert stop == "done" and len(kept) == len(full) == 40
    assert _same(summarize(kept, k=2, resampling=Resampling(500)), summarize(full, k=2, resampling=Resampling(500)))
    assert all(r.clarified is None or r.clarified.answer == "" for r in kept)  # the text stays on disk only
    assert any(r.clarified is not None and r.clarified.answer for r in full)


def _peak_bytes(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_jobs_spend_booking_and_end_hold_no_full_record(tmp_path: Path) -> None:
    """The spend limit's booking and the job's end read ``records.jsonl`` one record at a time: their peak is a
    small part of what a list of the dir's records takes (about 7 KB an instance, 134 MB at 20,000)."""
    answer = "水星是离太阳最近的行星。" * 150  # the arms' answers: most of a record's bytes
    with (tmp_path / RECORDS_FILE).open("w", encoding="utf-8") as f:
        for i in range(800):
            arm = ArmResult(query=f"介绍一下水星 {i}", answer=answer, labels={"n1": "full"}, score=50.0)
            usage = {"judge": {"calls": 1.0, "cost_usd": 0.001}}
            f.write(
                Record(id=f"i{i}", k=1, questions=("哪个?",), clarified=arm, orig=arm, usage=usage).to_json() + "\n"
            )
    held = _peak_bytes(lambda: list(read_records(tmp_path / RECORDS_FILE)))

    def end() -> None:
        limit = SpendLimit(max_usd=1.0, timeout_s=5.0, count_prior_spend=lambda usd, where: None)

        async def nothing() -> tuple[list[Record], str]:
            return [], "done"

        with within_spend_limit(nothing, tmp_path, limit) as job:
            job.result()
        metrics = spend_metrics(tmp_path, [], 800, DirRecords(tmp_path))
        assert metrics["cost_total_usd"] == pytest.approx(0.8)

    end()  # once first: what it imports is not what it holds
    assert _peak_bytes(end) < held / 10
