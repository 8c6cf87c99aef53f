"""The review queue: a seeded, stratified sample of a sweep's instance traces, tagged in MLflow.

    python -m cts.agreement queue outputs/multirun/2025-01-01_12-00-00 --n 60 --stratify system,k

Each drawn trace is tagged ``cts.review=todo`` and ``cts.review_arms`` (which answers to label:
``clarified`` as ``nugget.<id>``, ``orig`` as ``orig.nugget.<id>``; :mod:`cts.agreement.store`), so
that MLflow's trace search ``tags.cts.review = 'todo'`` lists exactly the queue. The ``n`` units
are split evenly over the strata (the values of ``--stratify``: ``system``, ``k``, ``arm``) and drawn
uniformly within each, so a prediction-powered estimate per system stays valid
(:mod:`cts.report.ppi`). A new draw replaces the sweep's earlier queue: its traces that are not drawn
again lose the tags (not their labels). Without ``arm`` a unit is one trace with both its answers (what Δ vs orig
needs); with it, one answer, and an orig answer that several jobs share is one unit.
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cts.report.agreement import arm_names
from cts.report.jobs import Job

STRATA = ("system", "k", "arm")
CLARIFIED, ORIG = "clarified", "orig"

__all__ = ["STRATA", "Unit", "draw", "queue_main", "units"]


@dataclass(frozen=True)
class Unit:
    """What one person labels: the answers ``arms`` of one instance trace of one job run."""

    run_id: str
    instance: str
    system: str
    k: int
    arms: tuple[str, ...]

    def stratum(self, keys: Sequence[str]) -> tuple[str, ...]:
        """The unit's values of ``keys`` (``arm``: its answers, joined)."""
        values = {"system": self.system, "k": str(self.k), "arm": ",".join(self.arms)}
        return tuple(values[k] for k in keys)


def units(jobs: Sequence[Job], by_arm: bool) -> list[Unit]:
    """Every unit of the sweep (repeat 0); ``by_arm``: one per answer, each shared orig answer once."""
    out: list[Unit] = []
    seen_orig: set[tuple[str, int, str]] = set()
    for job, (clarified, orig) in zip(jobs, arm_names(jobs)):
        for r in (r for r in job.records if r.repeat == 0):
            arms = [CLARIFIED] if clarified is not None and r.clarified is not None else []
            if r.orig is not None and (not by_arm or (orig, job.k, r.id) not in seen_orig):
                arms.append(ORIG)
                seen_orig.add((orig, job.k, r.id))
            system = job.label if clarified is not None else orig
            if by_arm:
                out += [Unit(job.run_id, r.id, system if a == CLARIFIED else orig, job.k, (a,)) for a in arms]
            elif arms:
                out.append(Unit(job.run_id, r.id, system, job.k, tuple(arms)))
    return out


def _rng(seed: int, stratum: Sequence[str]) -> np.random.Generator:
    digest = hashlib.sha256("\x1f".join([str(seed), *stratum]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def draw(jobs: Sequence[Job], n: int, stratify: Sequence[str], seed: int = 0) -> list[Unit]:
    """``n`` units split evenly over the strata (the first strata take the remainder), uniform within each."""
    unknown = sorted(set(stratify) - set(STRATA))
    if unknown:
        raise ValueError(f"--stratify: unknown {', '.join(unknown)}; choose from {', '.join(STRATA)}")
    groups: dict[tuple[str, ...], list[Unit]] = {}
    for u in units(jobs, "arm" in stratify):
        groups.setdefault(u.stratum(stratify), []).append(u)
    keys = sorted(groups)
    shares = [n // len(keys) + (i < n % len(keys)) for i in range(len(keys))] if keys else []
    drawn: list[Unit] = []
    for key, share in zip(keys, shares):
        pool = groups[key]
        picks = _rng(seed, key).choice(len(pool), size=min(share, len(pool)), replace=False)
        drawn += [pool[int(i)] for i in sorted(picks)]
    return drawn


def trace_tags(drawn: Sequence[Unit], traces: Mapping[tuple[str, str], str]) -> dict[str, dict[str, str]]:
    """Trace id -> its review tags (the arms of every unit drawn from it)."""
    arms: dict[str, list[str]] = {}
    for u in drawn:
        trace = traces.get((u.run_id, u.instance))
        if trace is not None:
            arms.setdefault(trace, []).extend(a for a in u.arms if a not in arms.get(trace, []))
    from cts import tracking

    return {t: {tracking.REVIEW_TAG: "todo", tracking.REVIEW_ARMS_TAG: ",".join(a)} for t, a in arms.items()}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cts.agreement queue", description=__doc__.split("\n")[0])
    p.add_argument("sweep", type=Path, help="a finished sweep dir whose jobs logged instance traces")
    p.add_argument("--n", type=int, default=60, help="units to draw (default 60)")
    p.add_argument("--stratify", default="system,k", help="strata, of system,k,arm (default system,k)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tracking-uri", default=None, help="MLflow store of the sweep's runs (default: the runs' own)")
    return p


def queue_main(argv: Sequence[str]) -> int:
    """``python -m cts.agreement queue <sweep>``: tag the sample; exit 1 with one ``error:`` line."""
    import sys

    from cts import tracking
    from cts.agreement.store import sweep_jobs_and_store

    args = _parser().parse_args(argv)
    stratify = [s.strip() for s in args.stratify.split(",") if s.strip()]
    found = sweep_jobs_and_store(args.sweep, args.tracking_uri)
    if isinstance(found, str):
        print(found, file=sys.stderr)
        return 1
    jobs, uri = found
    try:
        drawn = draw(jobs, args.n, stratify, args.seed)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    traces = tracking.instance_traces(uri, [j.run_id for j in jobs])
    tags = trace_tags(drawn, traces)
    if not tags:
        print(f"error: no instance trace of {args.sweep} in {uri}: run the sweep with tracking.instance_traces=true")
        return 1
    earlier = tracking.queued_traces(uri, [j.run_id for j in jobs]) - set(tags)
    tracking.untag_traces(uri, earlier, (tracking.REVIEW_TAG, tracking.REVIEW_ARMS_TAG))  # the new draw replaces it
    tracking.tag_traces(uri, tags)
    strata = len({u.stratum(stratify) for u in drawn})
    print(f"review queue: {len(drawn)} unit(s) from {strata} strata ({','.join(stratify)}), seed {args.seed}")
    print(f"MLflow: {len(tags)} trace(s) tagged {tracking.REVIEW_TAG}=todo in {uri}")
    if earlier:
        print(f"  {len(earlier)} trace(s) of an earlier queue of this sweep left it (labels on them are kept)")
    print(f"  the UI: experiment's Traces > Filters > Tag {tracking.REVIEW_TAG} = todo")
    print(f"  the API: mlflow.search_traces(filter_string=\"tags.{tracking.REVIEW_TAG} = 'todo'\")")
    print("  label each nugget as human feedback nugget.<id> (the clarified answer) or orig.nugget.<id> (orig),")
    print(f"  a string full, partial or none (docs/judges.md); then: python -m cts.agreement {args.sweep}")
    return 0
