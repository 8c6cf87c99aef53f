"""Human nugget labels of a finished sweep: each judge's agreement with people, and prediction-powered scores.

    python -m cts.agreement queue outputs/multirun/2025-01-01_12-00-00 --n 60   # the review queue in MLflow
    python -m cts.agreement outputs/multirun/2025-01-01_12-00-00                # the labels people recorded there
    python -m cts.agreement outputs/multirun/2025-01-01_12-00-00 --labels labels.jsonl

Without ``--labels`` the labels are the HUMAN assessments on the sweep's instance traces
(:mod:`cts.agreement.store`; ``--export labels.jsonl`` writes them in the file format); the queue
is :mod:`cts.agreement.queue`.

The labels (JSONL or CSV: instance, arm, nugget, label, annotator; :mod:`cts.data.human_labels`)
are checked against the sweep (every instance, arm and nugget must be one of its own) and kept
in ``<sweep>/agreement/labels.jsonl`` with the labelled instances' gold weights (``weights.json``:
ids and weights only), so that ``python -m cts.report <sweep>`` shows the same section from then
on. The tables (:mod:`cts.report.agreement`) go to ``<sweep>/agreement/`` (``agreement.md``, and
CSV, Markdown, LaTeX per table); each job run gets its judge's numbers against the annotators'
majority as metrics (``human_kappa``, ``human_alpha``, ``human_score_shift`` ...), and each of its
instance traces the human labels as expectations (``human_labels.<annotator>``, source ``HUMAN``).
Each system gets its prediction-powered restore_score_100 and Δ vs orig (:mod:`cts.report.ppi`):
a table here, Table 3's PPI columns in the sweep report, metrics ``score_ppi``, ``delta_ppi`` (with
``_low``/``_high``) and ``n_labelled`` on its job run. No model is called.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from cts.data.human_labels import HumanLabel, LabelsError, import_labels, read_labels, write_labels
from cts.report.agreement import (
    MAJORITY,
    Agreement,
    agreement_of,
    agreement_report,
    arm_names,
    judge_name,
    label_problems,
)
from cts.report.jobs import Job
from cts.report.ppi import ppi_metrics, ppi_rows, ppi_table
from cts.report.tables import Table, markdown, write_table
from cts.stats.bootstrap import Resampling


def sweep_weights(jobs: Sequence[Job]) -> dict[str, dict[str, int]]:
    """Instance -> gold nugget id -> weight, from the dataset the sweep's first job ran on.

    Its ``config.yaml`` is read in today's names (:mod:`cts.compose.stored_config`).
    """
    from cts.compose.app import build_node, build_services
    from cts.compose.stored_config import load_job_config

    job_dir = next((Path(j.job_dir) for j in jobs if (Path(j.job_dir) / "config.yaml").is_file()), None)
    if job_dir is None:
        raise FileNotFoundError("no job dir of the sweep has its config.yaml: the gold weights cannot be read")
    cfg = load_job_config(job_dir / "config.yaml")
    dataset = build_node(cfg.dataset, build_services(cfg))
    return {i: {n.id: int(n.weight) for n in g.nuggets} for i, g in dataset.gold.items()}


def write_outputs(
    sweep: Path, labels: Sequence[HumanLabel], weights: Mapping[str, Mapping[str, int]], tables: Sequence[Table]
) -> Path:
    """The imported labels, their weights, every table and the page ``agreement.md``."""
    out = import_labels(sweep, labels, weights)
    for t in tables:
        write_table(t, out)
    page = out / "agreement.md"
    parts = [f"# Judges and people\n\nSweep `{sweep}`; labels of {len({x.annotator for x in labels})} annotators.\n"]
    page.write_text("\n".join(parts + [f"## {t.caption}\n\n{markdown(t.display)}" for t in tables]), encoding="utf-8")
    return page


def run_metrics(jobs: Sequence[Job], tables: Sequence[Table]) -> dict[str, dict[str, float]]:
    """Per job run, its judge against the majority (``human_*``) and the annotators' own alpha."""
    by_name = {t.name: t.data for t in tables}
    ceiling = by_name["human_ceiling"].iloc[0]
    rows = by_name.get("human_agreement")
    out: dict[str, dict[str, float]] = {}
    for job in jobs:
        metrics = {"human_alpha_annotators": float(ceiling["alpha"])}
        if rows is not None and not rows.empty:
            mine = rows[(rows["judge"] == judge_name(job)) & (rows["reference"] == MAJORITY)]
            for r in mine.to_dict("records"):
                for key in ("kappa", "kappa_low", "kappa_high", "alpha", "alpha_low", "alpha_high", "exact"):
                    metrics[f"human_{key}"] = float(r[key])
                metrics.update({f"human_score_{k}": float(r[k]) for k in ("shift", "shift_low", "shift_high")})
                metrics["human_n_labels"] = float(r["n_labels"])
        if job.run_id:
            out[job.run_id] = metrics
    return out


def expectations(jobs: Sequence[Job], inp: Agreement) -> Iterator[tuple[str, str, object]]:
    """``(run id, instance, Assessed)``: each annotator's labels of the job's arms, as expectations."""
    from cts.tracking import Assessed

    for job, (clarified, orig) in zip(jobs, arm_names(jobs)):
        ids = {r.id for r in job.records}
        for prefix, arm in (("human_labels", clarified), ("human_orig_labels", orig)):
            for annotator, by_arm in inp.references().items():
                for (instance, name), labels in by_arm.items():
                    if name == arm and instance in ids and job.run_id:
                        text = " ".join(f"{n}={v}" for n, v in sorted(labels.items()))
                        meta = {"arm": name, "analysis": "human_agreement"}
                        yield (
                            job.run_id,
                            instance,
                            Assessed(f"{prefix}.{annotator}", text, "HUMAN", annotator, None, meta, expectation=True),
                        )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cts.agreement", description=__doc__.split("\n")[0])
    p.add_argument("sweep", type=Path, help="a finished sweep dir (or one job dir)")
    p.add_argument(
        "--labels", type=Path, default=None, help="human labels, JSONL or .csv (default: the MLflow store's)"
    )
    p.add_argument("--export", type=Path, default=None, help="write the store's labels to this JSONL file")
    p.add_argument("--n-resamples", type=int, default=Resampling().n_resamples)
    p.add_argument("--confidence", type=float, default=Resampling().confidence)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kappa-weights", choices=("linear", "quadratic"), default="linear")
    p.add_argument("--tracking-uri", default=None, help="MLflow store of the sweep's runs (default: the runs' own)")
    p.add_argument("--no-log", action="store_true", help="write the tables only; log nothing to MLflow")
    return p


def _errors(lines: Sequence[str]) -> int:
    print("\n".join(f"error: {p}" for p in lines), file=sys.stderr)
    return 1


def _file_labels(
    path: Path, jobs: Sequence[Job], weights: Mapping[str, Mapping[str, int]]
) -> list[str] | list[HumanLabel]:
    try:
        labels = read_labels(path)
    except (LabelsError, FileNotFoundError) as e:
        return list(getattr(e, "problems", [str(e)]))
    return [f"{path}: {p}" for p in problems] if (problems := label_problems(labels, jobs, weights)) else list(labels)


def _store_labels(
    args: argparse.Namespace, jobs: Sequence[Job], weights: Mapping[str, Mapping[str, int]]
) -> list[str] | list[HumanLabel]:
    from cts.agreement.store import store_labels, sweep_jobs_and_store

    found = sweep_jobs_and_store(args.sweep, args.tracking_uri)
    if isinstance(found, str):
        return [found.removeprefix("error: ")]
    labels, problems = store_labels(jobs, found[1], weights)
    if problems:
        return problems
    if not labels:
        return [
            f"no human label on the traces of {args.sweep} in {found[1]}: draw a queue "
            f"(python -m cts.agreement queue {args.sweep}) and label it in MLflow (docs/judges.md), or pass --labels"
        ]
    if args.export:
        print(f"-> {write_labels(labels, args.export)} ({len(labels)} labels)")
    return labels


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cts.agreement [queue] <sweep> ...``: exit 1 with one ``error:`` line per problem of the labels."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["queue"]:
        from cts.agreement.queue import queue_main

        return queue_main(argv[1:])
    args = _parser().parse_args(argv)
    from cts.report.jobs import load_jobs

    jobs = load_jobs(args.sweep)
    if not jobs:
        return _errors([f"no finished job found in {args.sweep}"])
    if args.labels and args.export:
        return _errors(["--export writes the store's labels: leave out --labels"])
    weights = sweep_weights(jobs)
    labels = _file_labels(args.labels, jobs, weights) if args.labels else _store_labels(args, jobs, weights)
    if not labels or isinstance(labels[0], str):
        return _errors([str(x) for x in labels])
    found = [x for x in labels if isinstance(x, HumanLabel)]
    inp = agreement_of(jobs, found, weights)
    tables = agreement_report(inp, Resampling(args.n_resamples, args.confidence, args.seed), args.kappa_weights)
    ppi = ppi_rows(jobs, inp, args.confidence)
    tables.append(ppi_table(ppi, args.confidence))
    page = write_outputs(args.sweep, found, weights, tables)
    if not args.no_log:
        _log(jobs, inp if args.labels else None, tables, ppi_metrics(ppi), args.tracking_uri)
    print(page.read_text(encoding="utf-8"))
    print(
        f"n_labelled: {', '.join(f'{s} k{k} {int(n)}' for s, k, n in zip(ppi['system'], ppi['k'], ppi['n_labelled']))}"
    )
    print(f"-> {page}")
    return 0


def _log(
    jobs: Sequence[Job],
    inp: Agreement | None,
    tables: Sequence[Table],
    ppi: Mapping[str, Mapping[str, float]],
    uri: str | None,
) -> None:
    """Metrics on the job runs; a labels file's labels (``inp``) also as expectations on their traces."""
    from cts import tracking

    stored = [json.loads((Path(j.job_dir) / "summary.json").read_text()).get("tracking_uri") for j in jobs]
    uri = uri or next((u for u in stored if u), None)
    if uri is None:
        print("no tracking URI: nothing logged to MLflow (--tracking-uri)", file=sys.stderr)
        return
    metrics = run_metrics(jobs, tables)
    for run_id, values in ppi.items():
        metrics[run_id] = {**metrics.get(run_id, {}), **values}
    n = tracking.log_to_runs(uri, metrics, expectations(jobs, inp) if inp is not None else ())  # type: ignore[arg-type]  # yields Assessed (imported lazily)
    print(f"MLflow: metrics on {len(jobs)} job run(s), {n} expectation(s) on their instance traces")
