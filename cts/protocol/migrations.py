"""Every rename since the first release, in one table: stored configs migrate, old command lines are told.

:data:`RENAMES` lists each retired name with its new one and the day it changed: config keys,
group options, and the Python paths that ``_target_`` values name (a module that moved, a class or
task renamed). Old paths do not import: a stored ``_target_`` resolves once migrated. Three things
are derived from the table:

- the stored-config migrations (:data:`MIGRATIONS`): a job dir stores its protocol config beside
  the fingerprint (``fingerprint.json``); when a key of it is renamed (one name, one meaning), the
  stored config hashes differently although it measures the same thing. :func:`migrate` rewrites a
  stored config into today's names; a dir resumes when the migrated config equals today's
  (:func:`cts.tasks.job.check_resume`), and never otherwise. A migration only renames: a changed
  value still refuses the resume.
- the migration of a job's whole stored config (:func:`migrate_job_config`: ``config.yaml``,
  ``.hydra/*.yaml``), for whatever reads one again (``python -m cts.agreement``, ``cts.plan``'s
  sample size): every key and ``_target_`` in today's names.
- the command line (:func:`renamed_on_command_line`, called by ``run.py`` before Hydra reads it):
  ``services.llm.model=x`` gets one ``error:`` line naming ``services.llm.served_name=x`` instead of
  Hydra's "Key 'model' is not in struct"; ``task._target_=cts.tasks.gold.gold_task`` one naming
  ``cts.tasks.build_gold.build_gold_task``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from typing import Any

Config = dict[str, Any]


@dataclass(frozen=True)
class Migration:
    """One rename of the protocol config.

    Attributes:
        what: What changed, as the resume message and the docs say it.
        apply: Rewrites a config in place from the names before the rename to the names after.
    """

    what: str
    apply: Callable[[Config], None]


def rename_path(old: str, new: str) -> Callable[[Config], None]:
    """A migration that moves the value at dotted path ``old`` to dotted path ``new`` (when ``new`` is absent)."""

    def apply(config: Config) -> None:
        *old_parents, old_key = old.split(".")
        *new_parents, new_key = new.split(".")
        source = _node_at(config, old_parents)
        if not isinstance(source, dict) or old_key not in source:
            return
        target: Any = config
        for part in new_parents:
            target = target.setdefault(part, {}) if isinstance(target, dict) else None
        if isinstance(target, dict) and new_key not in target:
            target[new_key] = source.pop(old_key)

    return apply


def _node_at(config: Config, parts: Sequence[str]) -> Any:
    node: Any = config
    for part in parts:
        node = node.get(part) if isinstance(node, dict) else None
    return node


def rename_in_nodes(target_suffix: str, old: str, new: str) -> Callable[[Config], None]:
    """A migration that renames key ``old`` to ``new`` in every node whose ``_target_`` ends with ``target_suffix``."""

    def apply(config: Config) -> None:
        for node in _nodes(config):
            if str(node.get("_target_", "")).endswith(target_suffix) and old in node and new not in node:
                node[new] = node.pop(old)

    return apply


def rename_target(old: str, new: str) -> Callable[[Config], None]:
    """A migration that rewrites every ``_target_`` naming ``old`` (a module or object path, or a path under it) to ``new``."""

    def apply(config: Config) -> None:
        for node in _nodes(config):
            value = node.get("_target_")
            if isinstance(value, str):
                node["_target_"] = _moved(value, old, new)

    return apply


def _moved(path: str, old: str, new: str) -> str:
    """``path`` with its leading ``old`` (the whole path, or a module of it) replaced by ``new``."""
    return new + path[len(old) :] if path == old or path.startswith(old + ".") else path


def _nodes(value: Any) -> list[dict[str, Any]]:
    """Every mapping inside ``value``, ``value`` itself included."""
    found: list[dict[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


@dataclass(frozen=True)
class Rename:
    """One name retired since the first release (2026-11-29), with the name that replaced it.

    Attributes:
        old: What a command line said: a dotted config key or node (``services.llm.model``,
            ``gold``), ``<group>=<option>`` (``experiment=gold``), with ``node`` a key of
            every such node (``model``), or with ``target`` a Python path a ``_target_`` named
            (``cts.callbacks``: the module and every path under it).
        new: What it says now, in the same form.
        on: The day of the rename.
        what: What the name means, as the message says it.
        protocol: Stored protocol configs hold the old name: :data:`MIGRATIONS` renames it there.
        node: For a key inside nodes: the ``_target_`` suffix of those nodes (``ModelSpec``).
        mounts: For a key inside nodes: the last keys of the paths those nodes are bound at on
            the command line (``clarifier.model``, ``search.summary_model``).
        target: ``old`` and ``new`` are Python paths of ``_target_`` values, not config keys.
    """

    old: str
    new: str
    on: str
    what: str = ""
    protocol: bool = False
    node: str = ""
    mounts: tuple[str, ...] = ()
    target: bool = False

    @property
    def group(self) -> str | None:
        """The config group of an option rename (``experiment``), else None."""
        return self.old.split("=", 1)[0] if "=" in self.old else None

    def migration(self) -> Migration:
        """The stored-config migration of this rename."""
        what = f"{self.what}: {self.old} -> {self.new}" if self.what else f"{self.old} -> {self.new}"
        if self.target:
            return Migration(what, rename_target(self.old, self.new))
        if self.node:
            return Migration(what, rename_in_nodes(self.node, self.old, self.new))
        return Migration(what, rename_path(self.old, self.new))


def _paths(on: str, what: str, moves: Mapping[str, str]) -> tuple[Rename, ...]:
    """One :class:`Rename` of a ``_target_`` path per ``old: new`` of ``moves`` (stored protocol configs name them)."""
    return tuple(Rename(old, new, on, what, protocol=True, target=True) for old, new in moves.items())


RENAMES: tuple[Rename, ...] = (
    *_paths(
        "2026-12-01",
        "a component or task moved into its package",
        {
            "cts.app.evaluate_task": "cts.tasks.evaluate.evaluate_task",
            "cts.app.gold_task": "cts.tasks.gold.gold_task",
            "cts.robustness.backbone_stability_task": "cts.tasks.backbone_stability.backbone_stability_task",
            "cts.robustness.judge_robustness_task": "cts.tasks.judge_robustness.judge_robustness_task",
            "cts.robustness.TypeRestrictedUserAnswerer": "cts.roles.baselines.TypeRestrictedUserAnswerer",
            "cts.robustness.BracketRewriterBaseline": "cts.roles.baselines.BracketRewriterBaseline",
            "cts.robustness.ConcretisingRewriterBaseline": "cts.roles.baselines.ConcretisingRewriterBaseline",
            "cts.judge.LexicalJudge": "cts.roles.lexical.LexicalJudge",
            "cts.extract.RuleExtractor": "cts.roles.nuggets.RuleExtractor",
            "cts.qtypes.LexiconQuestionTyper": "cts.roles.qtyper.LexiconQuestionTyper",
            "cts.qtypes.LLMQuestionTyper": "cts.roles.qtyper.LLMQuestionTyper",
        },
    ),
    *_paths(
        "2026-12-01",
        "cts/ holds packages only",
        {
            "cts.aio": "cts._util.aio",
            "cts.app": "cts.compose.app",
            "cts.budget": "cts.protocol.spend",
            "cts.callbacks": "cts.compose.callbacks",
            "cts.checks": "cts.compose.checks",
            "cts.confdiff": "cts._util.confdiff",
            "cts.diagnostics": "cts.protocol.diagnostics",
            "cts.errors": "cts.compose.errors",
            "cts.gate": "cts.gating.cli",
            "cts.goldfile": "cts.gold.file",
            "cts.index": "cts.corpus.index",
            "cts.interrupt": "cts._util.interrupt",
            "cts.io": "cts._util.io",
            "cts.job_files": "cts.protocol.job_files",
            "cts.lexicon": "cts.text.lexicon",
            "cts.metrics": "cts.protocol.metrics",
            "cts.naming": "cts._util.naming",
            "cts.outcome": "cts.protocol.outcome",
            "cts.pipeline": "cts.protocol.pipeline",
            "cts.prompts": "cts._util.prompts",
            "cts.qtypes": "cts.text.qtypes",
            "cts.records": "cts.core.records",
            "cts.scoring": "cts.core.scoring",
            "cts.secrets": "cts._util.secrets",
            "cts.services": "cts.compose.services",
            "cts.stages": "cts.protocol.stages",
            "cts.startup": "cts._util.startup",
            "cts.types": "cts.core.types",
            "cts.validate": "cts.compose.validate",
            "cts.versions": "cts._util.versions",
        },
    ),
    *_paths(
        "2026-12-01",
        "the config checks live in cts.compose",
        {
            "cts.llm.completion_probe": "cts.compose.completion_probe",
            "cts.llm.preflight": "cts.compose.model_checks",
            "cts.llm.rulecheck": "cts.compose.request_rules",
        },
    ),
    *_paths("2026-12-01", "the USD cap's module", {"cts.protocol.budget": "cts.protocol.spend"}),
    Rename("gold.fields", "dataset.fields", "2026-12-01", "the instance file's field names", protocol=True),
    Rename("search.max_tokens", "search.max_output_tokens", "2026-12-01", "a search turn's output cap", protocol=True),
    Rename("stats", "bootstrap", "2026-12-01", "the bootstrap settings", protocol=True),
    Rename("services.llm.budget", "services.llm.spend", "2026-12-01", "the USD cap"),
    Rename(
        "model",
        "id",
        "2026-12-01",
        "the litellm id of a model spec",
        protocol=True,
        node="ModelSpec",
        mounts=("model", "summary_model"),
    ),
    Rename(
        "services.llm.model",
        "services.llm.served_name",
        "2026-12-01",
        "the model name sent to services.llm.api_base",
        protocol=True,
    ),
    Rename("gold", "build_gold", "2026-12-01", "the gold build's config node", protocol=True),
    *_paths(
        "2026-12-01",
        "the gold build's task",
        {"cts.tasks.gold.gold_task": "cts.tasks.build_gold.build_gold_task", "cts.tasks.gold": "cts.tasks.build_gold"},
    ),
    *_paths("2026-12-01", "the gold file reader", {"cts.data.goldfile": "cts.gold.file"}),
    Rename("experiment=gold", "experiment=build_gold", "2026-12-01", "the gold build's preset"),
    Rename("task=gold", "task=build_gold", "2026-12-01", "the gold build's task"),
    Rename("hydra.callbacks.mlflow_store", "hydra.callbacks.cts", "2026-12-01", "the launch's Hydra callbacks"),
    *_paths(
        "2026-12-01",
        "the launch's Hydra callbacks (.hydra/hydra.yaml of older job dirs)",
        {"cts.compose.callbacks.PrepareTrackingStore": "cts.compose.callbacks.LaunchCallbacks"},
    ),
)
"""Every rename since the first release, oldest first (each migration applies to any older config)."""


def component_name(target: str) -> str:
    """The name a ``_target_`` has in the protocol config: a cts component's own name, not its module path.

    ``cts.roles.llm.LLMClarifier`` is ``LLMClarifier`` wherever its module moves (names are
    unique among cts's components: tests/compose/test_schema.py); a component of your own
    package keeps its full path.
    """
    return target.rsplit(".", 1)[-1] if target.startswith("cts.") else target


def name_components(config: Config) -> None:
    """Rewrite every ``_target_`` of ``config`` (in place) to its :func:`component_name`."""
    for node in _nodes(config):
        target = node.get("_target_")
        if isinstance(target, str):
            node["_target_"] = component_name(target)


NAMED_COMPONENTS = Migration("components by name, not module path: cts.llm.ModelSpec -> ModelSpec", name_components)
"""2026-12-04: the protocol config names each cts component, so a module move keeps the fingerprint."""

MIGRATIONS: tuple[Migration, ...] = (*(r.migration() for r in RENAMES if r.protocol), NAMED_COMPONENTS)
"""The renames of :data:`RENAMES` that stored protocol configs hold, oldest first, then the component names."""

JOB_CONFIG_MIGRATIONS: tuple[Migration, ...] = tuple(r.migration() for r in RENAMES if r.group is None)
"""The renames a job's whole stored config can hold: every key and ``_target_`` rename (not the options)."""


def migrate(stored: Mapping[str, Any], migrations: tuple[Migration, ...] | None = None) -> Config:
    """``stored`` with every rename of ``migrations`` (default :data:`MIGRATIONS`) applied, in order."""
    config = copy.deepcopy(dict(stored))
    for migration in MIGRATIONS if migrations is None else migrations:
        migration.apply(config)
    return config


def migrate_job_config(stored: Mapping[str, Any]) -> Config:
    """A job's stored config (``config.yaml``, ``.hydra/config.yaml``) in today's keys and ``_target_`` paths."""
    return migrate(stored, JOB_CONFIG_MIGRATIONS)


def current_target(path: str) -> str:
    """``path``, a ``_target_`` value, in today's names: every path rename of :data:`RENAMES` applied, oldest first."""
    for rename in RENAMES:
        if rename.target:
            path = _moved(path, rename.old, rename.new)
    return path


def renamed_target(path: str) -> str:
    """The part of an error line that names today's path of a retired ``_target_`` (empty for any other path)."""
    now = current_target(path)
    return "" if now == path else f"; {path} was renamed to {now} (cts/protocol/migrations.py)"


def same_config(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two protocol configs are equal as ``fingerprint.json`` stores them (JSON, ``default=str``)."""

    def canonical(x: Mapping[str, Any]) -> str:
        return json.dumps(x, sort_keys=True, default=str, ensure_ascii=False)

    return canonical(a) == canonical(b)


def renamed_on_command_line(args: Sequence[str], config_dirs: Sequence[Traversable] = ()) -> list[str]:
    """One problem line per override of ``args`` that uses a name :data:`RENAMES` retired, naming the new one.

    Args:
        args: The command line after the program (Hydra's flags and their values are skipped).
        config_dirs: The config dirs of the run (``conf/``, ``--config-dir``): an old option that
            still has a file there (a user's own ``experiment/gold.yaml``) is not a rename.
    """
    problems = []
    for arg in _overrides(args):
        for rename in RENAMES:
            fixed = _renamed(arg, rename, config_dirs)
            if fixed is not None:
                what = f" ({rename.what})" if rename.what else ""
                old, new = (
                    (rename.old, rename.new)
                    if not rename.node
                    else (f"{rename.node}.{rename.old}", f"{rename.node}.{rename.new}")
                )
                problems.append(f"{arg}: {old} was renamed to {new} on {rename.on}{what}; use {fixed}")
                break
    return problems


_VALUE_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn", "--experimental-rerun")


def _overrides(args: Sequence[str]) -> list[str]:
    """The overrides of a command line: neither Hydra's flags nor their values."""
    kept, skip = [], False
    for arg in args:
        if skip or arg.startswith("-"):
            skip = arg in _VALUE_FLAGS
            continue
        if "=" in arg or arg.startswith("~"):
            kept.append(arg)
    return kept


def _renamed(arg: str, rename: Rename, config_dirs: Sequence[Traversable]) -> str | None:
    """``arg`` in today's names when it uses ``rename``'s old name, else None."""
    prefix = arg[: len(arg) - len(arg.lstrip("+~"))]
    key, eq, value = arg[len(prefix) :].partition("=")
    if "@" in key:  # group@package=option binds a group, whose options are checked below by name
        key = key.split("@", 1)[0]
    if rename.target:
        moved = _moved(value, rename.old, rename.new)
        return f"{prefix}{key}={current_target(value)}" if key.split(".")[-1] == "_target_" and moved != value else None
    group = rename.group
    if group is not None:
        return _renamed_option(prefix, key, value, rename, config_dirs) if key == group and eq else None
    parts = key.split(".")
    if rename.node:
        if len(parts) >= 3 and parts[-1] == rename.old and parts[-2] in rename.mounts:
            return f"{prefix}{'.'.join([*parts[:-1], rename.new])}{eq}{value}"
        return None
    old = rename.old.split(".")
    if parts[: len(old)] == old:
        return f"{prefix}{'.'.join([*rename.new.split('.'), *parts[len(old) :]])}{eq}{value}"
    return None


def _renamed_option(
    prefix: str, key: str, value: str, rename: Rename, config_dirs: Sequence[Traversable]
) -> str | None:
    """``key=value`` with the old option replaced (every value of a sweep ``a,b``), else None."""
    old, new = rename.old.split("=", 1)[1], rename.new.split("=", 1)[1]
    values = [v.strip() for v in value.split(",")]
    if old not in values or any((d / key / f"{old}.yaml").is_file() for d in config_dirs):
        return None
    return f"{prefix}{key}={','.join(new if v == old else v for v in values)}"
