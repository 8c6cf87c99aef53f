"""The contract every declared stage keeps (:mod:`cts.core.stages`): a new stage's tests come from here.

:func:`contract_problems` lists what is wrong with one stage: its role Protocol's method takes
exactly the parameters the stage declares it may see; its LLM role class implements that method
with the same signature and declares its output schema; its prompt's placeholders are the declared
ones; its span is its own; its failures reach the unscored table, and its role the batch-role
check, when it says so.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

from cts._util.prompts import load_prompt
from cts.core.records import ErrorInfo, Record
from cts.core.stages import Stage, batch_roles, stages
from cts.protocol.unscored import unscored_rates

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"


def dotted(name: str) -> Any:
    """The object a dotted name names (``cts.core.contracts.Clarifier``)."""
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def parameters(fn: Any) -> tuple[str, ...]:
    """The parameter names of a method, without ``self``."""
    return tuple(p for p in inspect.signature(fn).parameters if p != "self")


def contract_problems(stage: Stage, prompts_dir: Path = PROMPTS) -> list[str]:
    """One line per broken promise of ``stage`` (empty: it keeps its contract)."""
    problems: list[str] = []
    method = getattr(dotted(stage.protocol), stage.method, None)
    if method is None or parameters(method) != stage.sees:
        problems.append(f"{stage.protocol}.{stage.method} does not take exactly {stage.sees}")
    target = stage.node.get("_target_")
    if target is not None and parameters(getattr(dotted(str(target)), stage.method)) != stage.sees:
        problems.append(f"{target}.{stage.method} does not take exactly {stage.sees}")
    if target is not None and not dict(dotted(str(target)).example_schema()):
        problems.append(f"{target} declares no output schema (example_schema)")
    if stage.prompt is not None:
        found = load_prompt(stage.prompt, prompts_dir).placeholders
        if found != set(stage.placeholders):
            problems.append(f"prompts/{stage.prompt}.md has {sorted(found)}, not {sorted(stage.placeholders)}")
        if stage.node.get("prompt") not in (None, stage.prompt):
            problems.append(f"its node plays prompt {stage.node.get('prompt')!r}, not {stage.prompt!r}")
    if [s.span for s in stages()].count(stage.span) != 1:
        problems.append(f"span {stage.span!r} is not its own")
    if stage.batchable != (stage.role in batch_roles()):
        problems.append(f"batch roles and batchable={stage.batchable} disagree")
    if stage.unscored and not _counted(stage):
        problems.append(f"its failures do not reach unscored_rate_{stage.role}_invalid_output")
    return problems


def _counted(stage: Stage) -> bool:
    record = Record(id="x", k=1, error=ErrorInfo(stage.name, "invalid_output", "unparseable"))
    return unscored_rates([record]).get(f"unscored_rate_{stage.role}_invalid_output", 0.0) > 0
