"""Task ``build_gold``: build the static gold archive once per ``fused_query`` (paper 4.2)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cts._util.loops import run as run_loop
from cts.core.contracts import Extractor, SearchBackend
from cts.core.errors import TaskStopped
from cts.core.stages import EXTRACTOR, SEARCH
from cts.core.types import Instance
from cts.tasks.job import RunInfo, log_task_outputs, prompt_versions, tracked_task
from cts.tasks.registry import TaskContext, task

if TYPE_CHECKING:
    from cts.gold import GoldArchive

log = logging.getLogger(__name__)


def read_gold_instances(ctx: TaskContext) -> list[Instance]:
    """The task's input: the instances of the dataset file (``dataset.path``, ``fields``, ``max_field_chars``)."""
    from cts.data.jsonl import MAX_FIELD_CHARS, read_instances_jsonl

    fields = ctx.value("dataset.fields", default=None)
    return read_instances_jsonl(
        ctx.value("dataset.path"), fields, ctx.value("dataset.max_field_chars", default=MAX_FIELD_CHARS)
    )


def compose_build_gold(ctx: TaskContext) -> float:
    """Read the instances, build search and extractor, archive their gold (the composer of :func:`build_gold_task`)."""
    from cts.gold import GoldArchive

    limit = ctx.value("limit")
    instances = ctx.input()
    provenance = {
        "backend": ctx.value("search._target_"),
        "extractor": ctx.value("extractor._target_"),
        "models": ctx.model_ids(SEARCH.role, EXTRACTOR.role),
        "config_fingerprint": ctx.fingerprint,
        "cts_version": __import__("cts").__version__,
    }
    return build_gold_task(
        instances=instances[:limit] if limit else instances,
        search=ctx.build("search"),
        extractor=ctx.build("extractor"),
        archive=GoldArchive(
            Path(ctx.value("build_gold.out_dir")),
            provenance,
            overwrite=bool(ctx.value("build_gold.overwrite")),
            allow_partial=bool(ctx.value("build_gold.allow_partial", default=False)),
        ),
        run=ctx.run,
        concurrency=ctx.value("concurrency"),
    )


@task(compose_build_gold, read=read_gold_instances, calls=(SEARCH.role, EXTRACTOR.role), writes=("build_gold.out_dir",))
def build_gold_task(
    *,
    instances: Sequence[Instance],
    search: SearchBackend,
    extractor: Extractor,
    archive: GoldArchive,
    run: RunInfo,
    concurrency: int = 8,
) -> float:
    """Build the static gold once per ``fused_query`` and archive it read-only (paper 4.2).

    The ``search`` backend runs on each intent query, the ``extractor`` turns its answer
    and evidence into weighted nuggets; instances whose gold does not validate are
    reported, not written.

    Args:
        instances: The instances (their ``fused_query``).
        search: The search backend.
        extractor: The nugget extractor.
        archive: The archive (``build_gold.out_dir``, ``overwrite``, ``allow_partial``) and its provenance:
            backend, extractor, models and config fingerprint (the prompts used are added).
        run: How the task's run is tracked.
        concurrency: Instances in flight at once.

    Returns:
        The number of instances with archived gold.
    """
    from cts.gold import build_gold_archive

    archived = replace(archive, provenance={**archive.provenance, "prompts": prompt_versions()})
    with tracked_task(run, "build_gold"):  # an infrastructure failure stops the build: nothing archived, exit 1
        report = run_loop(build_gold_archive(instances, search, extractor, archived, concurrency=concurrency))
        counts = {"n_instances": report.n_instances, "n_gold": report.n_gold, "n_failures": len(report.failures)}
        files = sorted(p for p in Path(report.out_dir).iterdir() if p.is_file())
        log_task_outputs({k: float(v) for k, v in counts.items()}, files)
    print(f"gold archive {report.out_dir}: {counts}, sha256 {report.gold_sha256[:12]}", flush=True)
    for instance_id, reason in report.failures:
        print(f"  no gold for {instance_id}: {reason}", flush=True)
    stop_on_partial_gold(report, archive.allow_partial)
    return float(report.n_gold)


def stop_on_partial_gold(report: Any, allow_partial: bool) -> None:
    """Stop (exit 1) when some instances got no gold, unless the user accepts a partial archive."""
    from cts.gold import FAILURES_FILE, failure_summary

    if not report.failures:
        return
    line = f"build_gold: {failure_summary(report)}; reasons in {Path(report.out_dir) / FAILURES_FILE}"
    if allow_partial:
        log.warning("%s (accepted: build_gold.allow_partial=true)", line)
        return
    raise TaskStopped(
        f"{line}\nRebuild (build_gold.overwrite=true), accept the partial archive (build_gold.allow_partial=true), "
        "or evaluate only the instances with gold (dataset.only_with_gold=true)."
    )
