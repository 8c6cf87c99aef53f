"""How human is the simulated user? A UA, a gate or a clarifier against real people's answers.

    python -m cts.realism clariq dataset.path=data/clariq/train.tsv ua=rules ua/persona=cooperative,terse
    python -m cts.realism clariq dataset.path=data/clariq/train.tsv --ask-or-not gate=rules,never,oracle
    python -m cts.realism clariq dataset.path=data/clariq/train.tsv --pattern clarifier=rules_region ua=rules

The first word names the dataset option (``clariq``, ``qulac``); the rest are Hydra overrides of
the project config, where ``a,b`` runs each value (one MLflow run each). Outputs go to
``outputs/realism/<time>/``: per run its tables (CSV) and ``pairs.jsonl``; ``report.md`` compares them.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from cts.stats.bootstrap import Resampling

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
_LEFT_OUT = ("dataset", "services.", "tracking.", "paths.", "bootstrap.", "seed")

__all__ = ["compose_config", "expand", "label_of", "main"]


def compose_config(overrides: Sequence[str]) -> DictConfig:
    """The project config with ``overrides`` (Hydra's compose API, outside a Hydra run)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def expand(overrides: Sequence[str]) -> list[list[str]]:
    """One override list per combination of the sweeps (``ua/persona=a,b`` -> two lists), in order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    choices = []
    for raw, o in zip(overrides, parsed):
        if o.is_sweep_override():
            key = o.get_key_element()
            choices.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            choices.append([raw])
    return [list(c) for c in itertools.product(*choices)]


def label_of(overrides: Sequence[str]) -> str:
    """A run's label: its overrides but the dataset, routing, paths and statistics settings."""
    shown = [o for o in overrides if not o.startswith(_LEFT_OUT) and not o.startswith("local_llm")]
    return " ".join(shown) or "defaults"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cts.realism", description=__doc__.split("\n")[0])
    p.add_argument("dataset", help="dataset option: clariq or qulac (dataset.path=<file> sets the file)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides (ua=..., ua/persona=..., gate=..., clarifier=...)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--ask-or-not", action="store_true", help="score gate=... against people's clarification_need")
    what.add_argument("--pattern", action="store_true", help="region/unknown pattern of clarifier=... with ua=...")
    p.add_argument("--sample", type=int, default=None, help="a seeded sample of N pairs (N facets with --pattern)")
    p.add_argument("--sample-seed", type=int, default=0)
    p.add_argument(
        "--replay", type=Path, default=None, help="the UA's answers from an earlier audit's pairs.jsonl (no call)"
    )
    p.add_argument("--ks", default="1,2,3", help="budgets of --pattern")
    p.add_argument("--out", type=Path, default=None, help="output dir (default: outputs/realism/<time>)")
    p.add_argument("--no-log", action="store_true", help="write the tables only; log nothing to MLflow")
    return p


def _mode(args: argparse.Namespace) -> str:
    return "ask_or_not" if args.ask_or_not else "pattern" if args.pattern else "audit"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cts.realism <dataset> [overrides]``: exit 1 with one ``error:`` line per problem."""
    from cts.compose.errors import InputError, missing_values
    from cts.data.jsonl import DatasetError
    from cts.realism.runs import people_pattern, run_one, write_report

    args = _parser().parse_intermixed_args(sys.argv[1:] if argv is None else argv)
    combos = expand([f"dataset={args.dataset}", *args.overrides])
    out = args.out or Path("outputs") / "realism" / time.strftime("%Y-%m-%d_%H-%M-%S")
    results: dict[str, Any] = {}
    name = ""
    for combo in combos:
        try:
            cfg = compose_config(combo)
        except Exception as e:  # noqa: BLE001 - Hydra's message is the one line the user needs
            print(f"error: {' '.join(combo)}: {e}", file=sys.stderr)
            return 1
        if problems := missing_values(cfg, exclude=("hydra", "paths")):
            print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
            return 1
        boot = Resampling(int(cfg.bootstrap.n_resamples), float(cfg.bootstrap.confidence), int(cfg.seed))
        label = label_of(combo)
        try:
            name, results[label] = run_one(cfg, _mode(args), label, out, boot, args)
        except (DatasetError, InputError) as e:
            print("\n".join(f"error: {p}" for p in e.problems), file=sys.stderr)
            return 1
    if args.pattern:  # people's own answers beside the clarifiers' (qtyper of the last run)
        results[f"people ({name}'s own questions)"] = people_pattern(cfg)
    page = write_report(out, name, _mode(args), results, args)
    print(page.read_text(encoding="utf-8"))
    print(f"-> {page}")
    return 0
