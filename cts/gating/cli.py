"""Evaluate an ask-or-not gate over a finished sweep, after the fact.

    python -m cts.gating outputs/multirun/2025-01-01_12-00-00 gate=rules
    python -m cts.gating outputs/multirun/... gate=llm services.llm.api_base=http://127.0.0.1:8000/v1
    python -m cts.gating clariq dataset.path=data/clariq/train.tsv gate=rules,never,oracle

The first word is a finished sweep's dir, or a dataset option whose people rated how much each
request needs clarification (``clariq``): then the gate is scored against them
(``python -m cts.realism <dataset> --ask-or-not``, :mod:`cts.realism.asking`).

The overrides after the sweep dir are Hydra overrides of the project config
(``gate=always|never|rules|llm|oracle`` and its options). No search or judge
call is made: the gated score of an instance is read from its finished record
(clarified arm where the gate asks, orig arm where it does not). The counters
printed (and written to ``gating/<gate>.json``) prove it: every LLM call made is
the gate's own.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from cts._util.naming import factors
from cts.core.stages import stages
from cts.protocol.pipeline import STAGE_CALLS
from cts.report.gate_evaluation import evaluate_gate
from cts.stats.bootstrap import Resampling

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
_ANALYSIS_ROLES = ("gate",)


def compose_config(overrides: Sequence[str]) -> DictConfig:
    """The project config with ``overrides`` (Hydra's compose API, outside a Hydra run)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def gate_jobs(sweep: str | Path, cfg: DictConfig) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Apply ``cfg.gate`` to every clarified job of ``sweep``.

    Returns:
        One row per job (label, k, mode and the :class:`GateResult` fields), and the
        call counters of the whole evaluation (LLM calls per role, search and judge calls).
    """
    from cts.compose.app import build_node, build_services
    from cts.report import load_jobs

    services = build_services(cfg)
    gate = build_node(cfg.gate, services)
    rows: list[dict[str, Any]] = []
    before = dict(STAGE_CALLS)
    with services.usage_scope() as usage:
        for job in load_jobs(str(sweep)):
            if job.is_orig:
                continue
            result, _ = evaluate_gate(job.records, gate, _resampling(cfg))
            rows.append({"system": job.label, "k": job.k, "mode": job.mode, **asdict(result)})
    return rows, counters(usage, before)


def counters(usage: Any, stage_calls_before: Mapping[str, int]) -> dict[str, float]:
    """Calls made during gating: the gate's LLM calls, and search/judge calls, which must stay 0.

    ``search_calls`` and ``judge_calls`` count the pipeline's search and judge invocations
    (:data:`cts.protocol.pipeline.STAGE_CALLS`) plus LLM calls billed to those roles;
    ``other_llm_calls`` counts LLM calls of any role but the gate.
    """
    calls = {role: float(u.get("calls", 0.0)) for role, u in dict(usage).items()}
    stage = {s.name: float(STAGE_CALLS[s.name] - stage_calls_before.get(s.name, 0)) for s in stages() if s.on_arm}
    return {
        "gate_llm_calls": sum(v for r, v in calls.items() if r in _ANALYSIS_ROLES),
        "search_calls": stage["search"] + calls.get("search", 0.0) + calls.get("visit", 0.0),
        "judge_calls": stage["judge"] + calls.get("judge", 0.0),
        "other_llm_calls": sum(v for r, v in calls.items() if r not in _ANALYSIS_ROLES),
    }


def _resampling(cfg: DictConfig) -> Resampling:
    return Resampling(int(cfg.bootstrap.n_resamples), float(cfg.bootstrap.confidence), int(cfg.seed))


def write_outputs(sweep: Path, name: str, rows: list[dict[str, Any]], calls: dict[str, float]) -> Path:
    """``<sweep>/gating/<name>.json`` (rows and counters) and ``<name>.md`` (a table)."""
    out = sweep / "gating"
    out.mkdir(parents=True, exist_ok=True)
    clean = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()} for r in rows]
    (out / f"{name}.json").write_text(
        json.dumps({"gate": name, "rows": clean, "counters": calls}, indent=2, ensure_ascii=False)
    )
    (out / f"{name}.md").write_text(table_markdown(name, rows, calls), encoding="utf-8")
    return out / f"{name}.md"


def table_markdown(name: str, rows: Sequence[dict[str, Any]], calls: dict[str, float]) -> str:
    """A Markdown table of the gating rows, then the counters."""
    cols = (
        "system",
        "k",
        "mode",
        "n",
        "ask_rate",
        "score_mean",
        "delta_vs_orig",
        "delta_ci_low",
        "delta_ci_high",
        "delta_vs_always",
        "precision",
        "recall",
        "questions_per_instance",
    )
    lines = [f"gate={name}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    lines += ["", "counters: " + ", ".join(f"{k}={int(v)}" for k, v in calls.items())]
    return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "–" if not math.isfinite(v) else f"{v:.3f}"
    return str(v)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cts.gating <sweep dir> [gate=NAME] [hydra overrides...]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-") or "=" in args[0]:
        print(__doc__, file=sys.stderr)
        return 2
    if not Path(args[0]).is_dir() and (CONF_DIR / "dataset" / f"{args[0]}.yaml").is_file():
        from cts.realism.cli import main as realism

        return realism([args[0], "--ask-or-not", *args[1:]])
    sweep, overrides = Path(args[0]), args[1:]
    cfg = compose_config(overrides)
    name = factors(overrides).get("gate", "always")
    rows, calls = gate_jobs(sweep, cfg)
    if not rows:
        print(f"no clarified job with records found in {sweep}", file=sys.stderr)
        return 1
    path = write_outputs(sweep, name, rows, calls)
    print(path.read_text(encoding="utf-8"), end="")
    return 0
