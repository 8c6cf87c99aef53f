"""Task ``gold``: build the static gold archive once per ``fused_query`` (paper 4.2)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cts.services import Services
from cts.tasks.job import Build, log_task_run, protocol_fingerprint

log = logging.getLogger(__name__)


def gold_task(cfg: DictConfig, services: Services, build: Build) -> float:
    """Build the static gold once per ``fused_query`` and archive it read-only (paper 4.2).

    The configured ``search`` backend runs on each intent query, the configured
    ``extractor`` turns its answer and evidence into weighted nuggets; instances
    whose gold does not validate are reported, not written.

    Returns:
        The number of instances with archived gold.
    """
    from cts.data import MAX_FIELD_CHARS, read_instances_jsonl
    from cts.gold import build_gold_archive
    from cts.llm.preflight import find_model_specs

    ds = cfg.dataset
    instances = read_instances_jsonl(ds.path, ds.get("fields"), ds.get("max_field_chars", MAX_FIELD_CHARS))
    instances = instances[: cfg.limit] if cfg.limit else instances
    search, extractor = build(cfg.search), build(cfg.extractor)
    models = OmegaConf.masked_copy(cfg, ["search", "extractor"])
    provenance = {
        "backend": cfg.search._target_,
        "extractor": cfg.extractor._target_,
        "models": {path: str(node.get("model")) for path, node in find_model_specs(models)},
        "config_fingerprint": protocol_fingerprint(cfg),
        "cts_version": __import__("cts").__version__,
    }
    report = asyncio.run(build_gold_archive(
        instances, search, extractor, cfg.gold.out_dir, provenance={**provenance, "prompts": services.prompt_versions()},
        concurrency=cfg.concurrency, overwrite=cfg.gold.overwrite,
    ))
    counts = {"n_instances": report.n_instances, "n_gold": report.n_gold, "n_failures": len(report.failures)}
    archive = sorted(p for p in Path(report.out_dir).iterdir() if p.is_file())
    log_task_run(cfg, "gold", {k: float(v) for k, v in counts.items()}, archive)
    print(f"gold archive {report.out_dir}: {counts}, sha256 {report.gold_sha256[:12]}", flush=True)
    for instance_id, reason in report.failures:
        print(f"  no gold for {instance_id}: {reason}", flush=True)
    stop_on_partial_gold(report, bool(cfg.gold.get("allow_partial", False)))
    return float(report.n_gold)


def stop_on_partial_gold(report: Any, allow_partial: bool) -> None:
    """Exit 1 when some instances got no gold, unless the user accepts a partial archive."""
    from cts.gold import FAILURES_FILE, failure_summary

    if not report.failures:
        return
    line = f"gold: {failure_summary(report)}; reasons in {Path(report.out_dir) / FAILURES_FILE}"
    if allow_partial:
        log.warning("%s (accepted: gold.allow_partial=true)", line)
        return
    sys.exit(f"{line}\nRebuild (gold.overwrite=true), accept the partial archive (gold.allow_partial=true), "
             "or evaluate only the instances with gold (dataset.only_with_gold=true).")
