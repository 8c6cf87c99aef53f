"""``python -m cts.plan <sweep dir> --delta 2 --power 0.8``: the sample size a claim needs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cts.plan", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a finished pilot sweep (or one job dir)")
    parser.add_argument("--delta", type=float, required=True, help="the paired difference to detect, in score points")
    parser.add_argument("--power", type=float, default=0.8, help="the chance to detect it (default 0.8)")
    parser.add_argument("--alpha", type=float, default=0.05, help="two-sided significance level (default 0.05)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print the sample-size table of every job of the sweep; 1 when there is none."""
    from cts.plan.sample_size import sample_size, sample_size_markdown
    from cts.report.jobs import job_dirs

    args = _parser().parse_args(argv)
    if not 0 < args.power < 1 or not 0 < args.alpha < 1 or args.delta == 0:
        print("error: --power and --alpha must be in (0, 1) and --delta must not be 0", file=sys.stderr)
        return 1
    dirs = job_dirs(args.sweep_dir) if args.sweep_dir.is_dir() else []
    rows, problems = [], []
    for job_dir in dirs:
        try:
            rows.append(sample_size(job_dir, args.delta, args.power, args.alpha))
        except ValueError as e:
            problems.append(f"{job_dir.name}: {e}")
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    if not rows:
        print(f"error: no finished job with paired deltas in {args.sweep_dir}", file=sys.stderr)
        return 1
    print(sample_size_markdown(rows, args.delta, args.power, args.alpha), end="")
    return 0
