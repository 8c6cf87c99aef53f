"""Checks of a composed config that need no job: what the run writes, unknown keys, the pre-flight.

:func:`output_problems` tries every place a run writes (its run or sweep dir, the SQLite
store and its artifacts, the dirs its task writes, e.g. a gold archive) by creating a file there
(:func:`cts._util.io.unwritable_reason`), which also holds for root, whom permission bits do not
stop: a read-only or full place is refused before Hydra opens its log file there.
:func:`preflight` lists unknown keys and unusable models (missing keys, request rules).
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from cts._util.io import unwritable_reason
from cts._util.launch import Preflight
from cts.compat.renames import renamed_target
from cts.compose.services import resource_parameters, settings_parameter
from cts.core.errors import PreflightFailed

__all__ = [
    "OFFLINE_COMMAND",
    "Place",
    "accepted_keys",
    "is_key_problem",
    "output_places",
    "output_problems",
    "preflight",
    "preflight_problems_of",
    "stop_on_problems",
    "task_writes",
    "unknown_key_problems",
]

OFFLINE_COMMAND = "python run.py experiment=offline"
_KEY_PROBLEM = " takes no argument "
_RULE_PROBLEM = " does not accept `"
_INSTANTIATE_KEYS = frozenset({"_target_", "_partial_", "_recursive_", "_convert_", "_args_"})


@dataclass(frozen=True)
class Place:
    """A dir a run writes, the key that chose it, how to choose another, the files in it the run appends to."""

    path: Path
    key: str
    hint: str
    files: tuple[str, ...] | None = None
    """Files to check when they exist (None: every file in the dir)."""


def output_places(cfg: DictConfig) -> list[Place]:
    """Where the run in ``cfg`` will write: its run or sweep dir, the SQLite store and its artifacts, its task's dirs."""
    root = "paths.output_root=DIR"
    mode = OmegaConf.select(cfg, "hydra.mode", default=None)
    key = "hydra.sweep.dir" if str(getattr(mode, "name", mode)) == "MULTIRUN" else "hydra.run.dir"
    places = []
    job_dir = OmegaConf.select(cfg, key, default=None)
    if job_dir is not None:
        places.append(Place(Path(str(job_dir)), key, f"{key}=DIR or {root}"))
        if key == "hydra.sweep.dir" and Path(str(job_dir)).is_dir():  # a resumed sweep writes in its job dirs
            places += [Place(p, key, f"{key}=DIR") for p in sorted(Path(str(job_dir)).iterdir()) if p.is_dir()]
    uri = str(OmegaConf.select(cfg, "tracking.uri", default="") or "")
    if uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///"))
        hint = f"tracking.uri=sqlite:///DIR/mlflow.db or {root}"
        places += [
            Place(db.parent, "tracking.uri", hint, (db.name, f"{db.name}.lock")),
            Place(db.parent / "artifacts", "tracking.uri", hint, ()),
        ]
    for out in task_writes(cfg):
        where = OmegaConf.select(cfg, out, default=None, throw_on_missing=False)
        if where is not None:
            places.append(Place(Path(str(where)).absolute().parent, out, f"{out}=DIR", ()))
    return places


def task_writes(cfg: DictConfig) -> tuple[str, ...]:
    """The config keys of the dirs the task of ``cfg`` writes besides its job dir (its ``@task(writes=...)``)."""
    from cts.tasks.registry import task_spec

    target = OmegaConf.select(cfg, "task._target_", default=None, throw_on_missing=False)
    try:
        return task_spec(str(target)).writes if target else ()
    except ValueError:  # not a cts task: the run refuses it itself, with its own line
        return ()


def output_problems(cfg: DictConfig) -> list[str]:
    """One line per place the run cannot write (what refused, why, the key that writes elsewhere)."""
    out: dict[Path, str] = {}
    for place in output_places(cfg):
        found = unwritable_reason(place.path, place.files)
        if found is not None and found[0] not in out:
            where, reason = found
            needed = "" if where == place.path or where.parent == place.path else f" (needed for {place.path})"
            out[where] = f"{where}: cannot be written: {reason}{needed}; write elsewhere with {place.hint}"
    return list(out.values())


def unknown_key_problems(node: Any, path: str = "") -> list[str]:
    """One message per config key that no component accepts (a typo such as ``judge.treshold``).

    Every node with a ``_target_`` is checked against the signature of what it builds;
    a target taking ``**kwargs`` accepts anything and is not checked.
    """
    problems: list[str] = []
    if isinstance(node, DictConfig):
        keys = [str(k) for k in node]
        if "_target_" in keys:
            problems += _unknown_keys(node, keys, path)
        for key in keys:
            if not OmegaConf.is_missing(node, key) and isinstance(node._get_node(key), (DictConfig, ListConfig)):
                problems += unknown_key_problems(node[key], f"{path}.{key}" if path else key)
    elif isinstance(node, ListConfig):
        for i, item in enumerate(node):
            problems += unknown_key_problems(item, f"{path}[{i}]")
    return problems


def _unknown_keys(node: DictConfig, keys: list[str], path: str) -> list[str]:
    target_node = node._get_node("_target_")
    assert target_node is not None  # the caller found "_target_" among the keys
    target = str(target_node._value())
    try:
        configurable = accepted_keys(target)
    except (ImportError, AttributeError, ValueError, TypeError) as e:
        return [f"{path}._target_: cannot load {target} ({e}){renamed_target(target)}"]
    if configurable is None:
        return []
    known = configurable | _INSTANTIATE_KEYS
    return [
        f"{path}.{k}: {target}{_KEY_PROBLEM}{k!r} (it takes: {', '.join(sorted(configurable))})"
        for k in keys
        if k not in known
    ]


def accepted_keys(target: str) -> set[str] | None:
    """The config keys the component ``target`` takes, by its signature (None: it takes ``**kwargs``, so any).

    Raises:
        ImportError: And AttributeError, ValueError, TypeError: ``target`` cannot be loaded or inspected.
    """
    obj = get_object(target)
    params = inspect.signature(obj).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    configurable = set(params) - resource_parameters(obj) - {"self"}  # resources are never config keys
    bound = settings_parameter(obj)
    if bound is not None:  # its settings object's fields are flat keys
        configurable = (configurable - {bound[0]}) | {f.name for f in dataclasses.fields(bound[1])}
    return configurable


def is_key_problem(problem: str) -> bool:
    return _KEY_PROBLEM in problem or "._target_: cannot load " in problem


def preflight(cfg: DictConfig, groups: tuple[str, ...] | None = None) -> None:
    """Fail fast, before anything runs, when a role's model cannot be reached.

    Args:
        cfg: The composed config.
        groups: Only check these top-level keys (None = the whole config).
    """
    stop_on_problems(preflight_problems_of(cfg, groups))


def preflight_problems_of(
    cfg: DictConfig, groups: tuple[str, ...] | None = None, memo: Preflight | None = None
) -> list[str]:
    """The pre-flight problems of one composed config: unknown keys, unreachable models.

    Args:
        cfg: The composed config.
        groups: Only check these top-level keys for models (None = the whole config).
        memo: The launch's pre-flight memo: the task's keys are copied once per job
            (:func:`cts.compose.probes.scoped_copy`; ``groups`` must then be the task's).
    """
    from cts.compose.model_checks import preflight_problems
    from cts.compose.probes import scoped_copy
    from cts.compose.request_rules import rule_problems

    components = [str(k) for k in cfg if k not in ("hydra", "task")]  # each walked in place, not copied
    unknown = [p for k in components if _is_container(cfg, k) for p in unknown_key_problems(cfg[k], k)]
    if memo is not None and groups:
        scoped = scoped_copy(cfg, memo)
    else:
        scoped = OmegaConf.masked_copy(cfg, list(groups)) if groups else cfg
    return unknown + preflight_problems(scoped) + rule_problems(scoped)


def _is_container(cfg: DictConfig, key: str) -> bool:
    """Whether ``cfg.key`` is set to a config node (what :func:`unknown_key_problems` walks into)."""
    return not OmegaConf.is_missing(cfg, key) and isinstance(cfg._get_node(key), DictConfig | ListConfig)


def stop_on_problems(problems: list[str]) -> None:
    """Exit non-zero with one message listing every problem (nothing has run yet)."""
    if not problems:
        return
    lines = "\n".join(f"  - {p}" for p in dict.fromkeys(problems))
    hints = []
    if any(is_key_problem(p) for p in problems):
        hints.append("Correct or remove the config keys above.")
    if any(_RULE_PROBLEM in p for p in problems):  # cts.compose.request_rules
        hints.append("Change or remove the parameters above; the model file's `request:` node cites each rule.")
    if not all(is_key_problem(p) or _RULE_PROBLEM in p for p in problems):
        hints.append(
            "Set the variables above (or point every role at one OpenAI-compatible server with "
            f"services.llm.api_base=URL), or run the offline stack: {OFFLINE_COMMAND}"
        )
    raise PreflightFailed(f"cts pre-flight failed; nothing was run:\n{lines}\n" + "\n".join(hints))
