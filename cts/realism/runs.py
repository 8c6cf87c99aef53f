"""One realism run from a composed config: build what it needs, run it, write its tables, log it to MLflow."""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cts.compose.app import build_node, build_services
from cts.compose.services import local_llm_served
from cts.data.human_answers import HumanAnswerDataset
from cts.realism import report
from cts.realism.asking import gate_metrics, requests_of, score_requests
from cts.realism.audit import AuditResult, ReplayedUA, dataset_pairs, run_audit, sample_pairs
from cts.realism.metrics import human_distance
from cts.realism.pattern import human_turns, pattern_row, run_turns
from cts.stats.agreement import Estimate
from cts.stats.bootstrap import Resampling

__all__ = ["people_pattern", "run_one", "write_report"]

EXPERIMENT = "cts-realism"
Build = Callable[[Any], Any]
"""Builds one config node into its component (the composition layer's builder, bound to the run's services)."""


_UNSAFE = re.compile(r"[^\w.,=+\-@]+")


def run_one(
    cfg: DictConfig, mode: str, label: str, out: Path, boot: Resampling, args: argparse.Namespace
) -> tuple[str, Any]:
    """Run ``mode`` (audit, ask_or_not, pattern) for one composed config; returns the dataset name and result."""
    services = build_services(cfg)
    dataset: HumanAnswerDataset = build_node(cfg.dataset, services)
    run_dir = out / (_UNSAFE.sub("_", label) or "defaults")
    run_dir.mkdir(parents=True, exist_ok=True)
    with local_llm_served(services, build_node(cfg.services.get("local_llm"), services), run_dir) as served:

        def build(node: Any) -> Any:  # the run's components, on the services its local LLM server serves
            return build_node(node, served)

        start = time.perf_counter()
        result, files, metrics = _RUNNERS[mode](cfg, build, dataset, run_dir, boot, args)
        seconds = time.perf_counter() - start
    metrics = {**metrics, "seconds": seconds}
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
    files = [*files, write_report(run_dir, dataset.name, mode, {label: result}, args)]  # this run's own table
    if not args.no_log:
        params = _params(cfg, mode, label, dataset, args)
        uri = str(OmegaConf.select(cfg, "tracking.uri"))
        from cts import tracking

        tracking.log_analysis_run(
            uri,
            tracking.AnalysisRun(
                EXPERIMENT,
                f"{dataset.name} {label}",
                params,
                metrics,
                [*files, run_dir / "metrics.json"],
                {"cts.kind": "realism"},
            ),
        )
    return dataset.name, result


def _params(
    cfg: DictConfig, mode: str, label: str, dataset: HumanAnswerDataset, args: argparse.Namespace
) -> dict[str, str]:
    return {
        "analysis": mode,
        "dataset": dataset.name,
        "label": label,
        "sample": str(args.sample),
        "sample_seed": str(args.sample_seed),
        "replay": str(args.replay or ""),
        "bootstrap.n_resamples": str(cfg.bootstrap.n_resamples),
        "bootstrap.confidence": str(cfg.bootstrap.confidence),
        "seed": str(cfg.seed),
    }


def _flat(metrics: Mapping[str, Estimate]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, e in metrics.items():
        out.update({name: e.value, f"{name}_low": e.low, f"{name}_high": e.high, f"{name}_n": float(e.n)})
    return out


def _audit(
    cfg: DictConfig,
    build: Build,
    dataset: HumanAnswerDataset,
    run_dir: Path,
    boot: Resampling,
    args: argparse.Namespace,
) -> tuple[AuditResult, list[Path], dict[str, float]]:
    ua = ReplayedUA(args.replay, build(cfg.ua)) if args.replay else build(cfg.ua)
    pairs = sample_pairs(dataset_pairs(dataset), args.sample, args.sample_seed)
    result = run_audit(ua, pairs, boot, int(cfg.concurrency))
    files = [
        report.write_rows(run_dir / "realism.csv", report.audit_rows(result)),
        report.write_rows(run_dir / "confusion.csv", report.confusion_table(result)),
    ]
    # The pairs hold the dataset's text: they stay in the output dir, never an artifact.
    with (run_dir / "pairs.jsonl").open("w", encoding="utf-8") as f:
        for p in result.pairs:
            f.write(json.dumps(asdict(p), ensure_ascii=False) + "\n")
    failed = float(sum(result.failures.values()))
    return (
        result,
        files,
        {
            **_flat(result.metrics),
            "pairs": float(len(result.pairs)),
            "distance": human_distance(result.metrics),
            "failed": failed,
            "ua_seconds": result.seconds,
            "replayed": float(getattr(ua, "replayed", 0)),
        },
    )


def _ask_or_not(
    cfg: DictConfig,
    build: Build,
    dataset: HumanAnswerDataset,
    run_dir: Path,
    boot: Resampling,
    args: argparse.Namespace,
) -> tuple[dict[str, Estimate], list[Path], dict[str, float]]:
    requests = requests_of(dataset)
    if not requests:
        from cts.data.jsonl import DatasetError

        raise DatasetError([f"{dataset.name}: no clarification_need label (ask-or-not needs ClariQ)"])
    metrics = gate_metrics(score_requests(build(cfg.gate), requests), boot)
    files = [report.write_rows(run_dir / "gate.csv", [{"metric": k, **asdict(v)} for k, v in metrics.items()])]
    return metrics, files, _flat(metrics)


def _pattern(
    cfg: DictConfig,
    build: Build,
    dataset: HumanAnswerDataset,
    run_dir: Path,
    boot: Resampling,
    args: argparse.Namespace,
) -> tuple[dict[str, float], list[Path], dict[str, float]]:
    import random

    instances = [i for i in dataset.instances]
    if args.sample is not None and args.sample < len(instances):
        keep = sorted(random.Random(args.sample_seed).sample(range(len(instances)), args.sample))
        instances = [instances[i] for i in keep]
    ks = tuple(int(k) for k in str(args.ks).split(","))
    turns = run_turns(
        build(cfg.clarifier),
        build(cfg.ua),
        build(cfg.qtyper),
        instances,
        ks,
    )
    row = pattern_row(turns)
    with (run_dir / "turns.jsonl").open("w", encoding="utf-8") as f:  # local only, as the audit's pairs
        for t in turns:
            f.write(json.dumps(asdict(t), ensure_ascii=False) + "\n")
    files = [report.write_rows(run_dir / "pattern.csv", [row])]
    return row, files, row


def people_pattern(cfg: DictConfig) -> dict[str, float]:
    """The pattern's statistics of people's own answers to the dataset's own questions (typed by ``cfg.qtyper``)."""
    services = build_services(cfg)
    dataset: HumanAnswerDataset = build_node(cfg.dataset, services)
    return pattern_row(human_turns(dataset, build_node(cfg.qtyper, services)))


_RUNNERS: dict[str, Any] = {"audit": _audit, "ask_or_not": _ask_or_not, "pattern": _pattern}


def write_report(out: Path, name: str, mode: str, results: Mapping[str, Any], args: argparse.Namespace) -> Path:
    """``report.md``: the comparison table of every run (and, for the audit, each run's confusion matrix)."""
    sample = f"a seeded sample of {args.sample} (seed {args.sample_seed})" if args.sample else "all"
    parts = [f"# {name}: {mode.replace('_', '-')}\n", f"Dataset `{name}`; items: {sample}.\n"]
    if mode == "audit":
        rows, cols = report.comparison_table(results)
        parts.append(report.markdown(rows, cols))
        for label, r in results.items():
            parts.append(
                f"\nAnswerability, `{label}` (rows: people; columns: the UA)\n\n"
                + report.markdown(report.confusion_table(r), ["person \\ UA", "UA: no answer", "UA: informative"])
            )
    elif mode == "ask_or_not":
        rows, cols = report.gate_table(results)
        parts.append(report.markdown(rows, cols))
    else:
        parts.append(report.markdown(report.pattern_table(results), report.PATTERN_COLUMNS))
    page = out / "report.md"
    page.write_text("\n".join(parts), encoding="utf-8")
    return page
