"""Synthetic jobs of a sweep (two systems, k=1) with known judge labels, for the queue, store and PPI tests."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cts.core.records import ArmResult, Record
from cts.core.scoring import restore_score
from cts.core.types import LABELS, Label, Nugget
from cts.report.jobs import Job, label_jobs

NUGGETS = tuple(Nugget(f"n{i}", f"fact {i}", i) for i in (1, 2, 3))
WEIGHTS = {n.id: int(n.weight) for n in NUGGETS}


def arm(labels: Mapping[str, Label], query: str = "q") -> ArmResult:
    return ArmResult(query, "an answer", labels=dict(labels), score=restore_score(labels, NUGGETS))


def random_labels(rng: np.random.Generator) -> dict[str, Label]:
    return {n.id: LABELS[int(rng.integers(0, 3))] for n in NUGGETS}  # type: ignore[misc]


def sweep(n: int = 100, seed: int = 0) -> tuple[list[Job], dict[str, dict[str, int]]]:
    """Two system jobs over the same ``n`` instances (``i000``..), one orig answer per instance."""
    rng = np.random.default_rng(seed)
    ids = [f"i{i:03d}" for i in range(n)]
    origs = {i: random_labels(rng) for i in ids}
    jobs = []
    for run, system in (("run-a", "rules_scope"), ("run-b", "rules_region")):
        records = tuple(
            Record(i, 1, questions=("which one?",), clarified=arm(random_labels(rng)), orig=arm(origs[i])) for i in ids
        )
        jobs.append(Job(system, 1, records, {"judge": "lexical"}, run_id=run))
    return label_jobs(jobs), {i: dict(WEIGHTS) for i in ids}
