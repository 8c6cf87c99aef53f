"""``python -m cts.release inspect|import|export``: the paper's release as downloaded, and cts runs in its layout.

python -m cts.release inspect release/                      # each file's layout and the mapping cts uses
python -m cts.release import release/ [--out DIR] [--tracking-uri URI]   # its outputs as job dirs + MLflow runs
python -m cts.release export <job or sweep dir> --out DIR   # cts answers in the release's candidate layout
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from cts.compose.schema import Config, default_of
from cts.release.describe import inspect_release
from cts.release.export import export_runs
from cts.release.importer import ImportRefused, default_tracking_uri, import_release, report_imported
from cts.release.outputs import NAME_PATTERN, OutputLayoutError, scan_outputs


def _pairs(items: Sequence[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"{flag} {item}: write it as KEY=NAME")
        out[key] = value
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cts.release", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("inspect", "import"):
        p = sub.add_parser(name)
        p.add_argument("release", type=Path, help="the unzipped release/ dir")
        p.add_argument("--field", action="append", metavar="KEY=NAME", help="an output file's key (repeatable)")
        p.add_argument(
            "--name-pattern", default=NAME_PATTERN, help="regex with (?P<system>) and (?P<k>) of a file name"
        )
    ins = sub.choices["inspect"]
    ins.add_argument("--column", action="append", metavar="PAPER=COLUMN", help="as dataset.fields.<paper> (repeatable)")
    ins.add_argument(
        "--gold-field", action="append", metavar="KEY=NAME", help="as dataset.gold_fields.<key> (repeatable)"
    )
    imp = sub.choices["import"]
    imp.add_argument("--out", type=Path, default=None, help="where the job dirs go (default outputs/release/<name>)")
    imp.add_argument("--tracking-uri", default=None, help="MLflow store (default: run.py's, outputs/mlflow.db)")
    imp.add_argument("--experiment", default=default_of(Config, "tracking.experiment"))
    exp = sub.add_parser("export")
    exp.add_argument("source", nargs="+", help="a job dir or sweep dir (or several)")
    exp.add_argument("--out", type=Path, required=True, help="where candidates/ and clarify_only/ go")
    exp.add_argument("--dataset", default=None, help="the file names' suffix (default: each job's dataset)")
    exp.add_argument(
        "--like", type=Path, default=None, help="a released candidate file: write its keys (the mapping, reversed)"
    )
    exp.add_argument("--field", action="append", metavar="KEY=NAME", help="the key to write a part under (repeatable)")
    return parser


def _inspect(args: argparse.Namespace) -> int:
    lines, problems = inspect_release(
        args.release,
        _pairs(args.column, "--column"),
        _pairs(args.gold_field, "--gold-field"),
        _pairs(args.field, "--field"),
        args.name_pattern,
    )
    print("\n".join(lines))
    _errors(problems)
    print(f"{len(problems)} problem(s)" if problems else "no problem: cts reads every file as shown")
    return 1 if problems else 0


def _import(args: argparse.Namespace) -> int:
    uri = args.tracking_uri or default_tracking_uri()
    jobs = import_release(
        args.release,
        args.out,
        uri,
        experiment=args.experiment,
        pattern=args.name_pattern,
        fields=_pairs(args.field, "--field"),
    )
    for job in jobs:
        unknown = job.metrics.get("ua_unknown_rate", float("nan"))
        print(f"{job.system} k={job.k}: {job.n_records} records, ua_unknown_rate {unknown:.3f} -> {job.job_dir}")
    report = report_imported(jobs[0].job_dir.parent)
    if not report.ok or report.out_dir is None:
        _errors(list(report.errors))
        return 1
    print(f"report (Tables 4, 5, 7, 8, 10): {report.out_dir / 'report.md'}")
    print(f"runs: mlflow ui --backend-store-uri {uri} --workers 1")
    return 0


def _export(args: argparse.Namespace) -> int:
    source = args.source[0] if len(args.source) == 1 else args.source
    names: dict[str, str | None] = dict(scan_outputs(args.like, "candidates").names) if args.like else {}
    names.update(_pairs(args.field, "--field"))
    for f in export_runs(source, args.out, args.dataset, names):
        gap = f" ({f.n_without_answer} without an answer, left out)" if f.n_without_answer else ""
        print(f"{f.path}: {f.n_rows} rows{gap}")
    return 0


def _errors(problems: Sequence[str]) -> None:
    for p in dict.fromkeys(problems):
        print(f"error: {' '.join(p.splitlines())}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a user's mistake is one ``error:`` line per problem and exit status 1."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = _parser().parse_args(argv)
    run = {"inspect": _inspect, "import": _import, "export": _export}[args.command]
    try:
        return run(args)
    except ImportRefused as e:
        _errors(e.problems)
    except (OutputLayoutError, FileNotFoundError, ValueError) as e:
        _errors([str(e)])
    return 1
