"""``python -m cts.report``: build a sweep report from the command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from cts.compose.schema import Bootstrap
from cts.protocol.repeats import PASS_THRESHOLD
from cts.report.build import ReportSettings, build_sweep_report, log_sweep_report
from cts.stats.bootstrap import Resampling
from cts.stats.compare import P_VALUE_TESTS

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cts.report <sweep dir | experiment> [--tracking-uri URI] [--out DIR] [--log]``."""
    parser = argparse.ArgumentParser(prog="python -m cts.report", description=__doc__.split("\n")[0])
    parser.add_argument("source", nargs="+", help="a sweep dir, job dirs, or an MLflow experiment name")
    parser.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (for an experiment name)")
    parser.add_argument("--out", type=Path, default=None, help="output dir (default: <sweep>/report)")
    parser.add_argument("--n-resamples", type=int, default=Bootstrap().n_resamples)
    parser.add_argument("--confidence", type=float, default=Bootstrap().confidence)
    parser.add_argument(
        "--p-value", choices=P_VALUE_TESTS, default="bootstrap", help="test of Table 3's p-values (Holm-adjusted)"
    )
    parser.add_argument(
        "--pass-threshold",
        type=float,
        default=PASS_THRESHOLD,
        help="restore_score_100 at or above which a repeat passes (pass^k in the repeats table)",
    )
    parser.add_argument(
        "--log",
        metavar="EXPERIMENT",
        default=None,
        help="also log the report as an MLflow run in EXPERIMENT (needs --tracking-uri)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    source = args.source[0] if len(args.source) == 1 else args.source
    uri = args.tracking_uri or _default_uri()
    result = build_sweep_report(
        source,
        args.out,
        uri,
        ReportSettings(Resampling(args.n_resamples, args.confidence), args.p_value, args.pass_threshold),
    )
    if not result.ok or result.out_dir is None:
        print("\n".join(result.errors), file=sys.stderr)
        return 1
    if args.log:
        log_sweep_report(result, uri, args.log)
    print(f"{result.n_jobs} jobs -> {result.out_dir / 'report.md'}")
    return 0


def _default_uri() -> str:
    import os

    return os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///outputs/mlflow.db")
