"""The retired names: :data:`RENAMES`, read from the table ``renames.tsv``, and the command line's error lines.

Each row of ``renames.tsv`` is one name retired since the first release, with the name that
replaced it and the day: config keys, group options, and the Python paths that ``_target_``
values name (a module that moved, a class or task renamed). Old paths do not import: a stored
``_target_`` resolves once migrated (:mod:`cts.compat.config`). On the command line
(:func:`renamed_on_command_line`, called by ``run.py`` before Hydra reads it),
``services.llm.model=x`` gets one ``error:`` line naming ``services.llm.served_name=x`` instead of
Hydra's "Key 'model' is not in struct". Retiring a name is one row of the table, not code.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

from cts.compat.migrate import Migration, moved, rename_in_nodes, rename_path, rename_target

TABLE = "renames.tsv"
"""The table of retired names, beside this module."""


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
        protocol: Stored protocol configs hold the old name: :data:`cts.compat.config.MIGRATIONS` renames it there.
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


def _row(old: str, new: str, on: str, scope: str, what: str) -> Rename:
    """One row of the table: its ``scope`` words (``target``, ``protocol``, ``node=<suffix>`` ...) as fields."""
    words = dict(w.partition("=")[::2] for w in scope.split())
    return Rename(
        old,
        new,
        on,
        what,
        protocol="protocol" in words or "target" in words,
        node=words.get("node", ""),
        mounts=tuple(m for m in words.get("mounts", "").split(",") if m),
        target="target" in words,
    )


def read_renames(table: Traversable | None = None) -> tuple[Rename, ...]:
    """The rows of ``table`` (default: ``renames.tsv`` beside this module), oldest first; ``#`` lines are comments."""
    text = (table or files(__package__) / TABLE).read_text(encoding="utf-8")
    rows = csv.reader((line for line in text.splitlines() if not line.startswith("#")), delimiter="\t")
    header = next(rows)
    assert header == ["old", "new", "on", "scope", "what"], header
    return tuple(_row(*row) for row in rows if row)


RENAMES: tuple[Rename, ...] = read_renames()
"""Every rename since the first release, oldest first (each migration applies to any older config)."""


def current_target(path: str) -> str:
    """``path``, a ``_target_`` value, in today's names: every path rename of :data:`RENAMES` applied, oldest first."""
    for rename in RENAMES:
        if rename.target:
            path = moved(path, rename.old, rename.new)
    return path


def renamed_target(path: str) -> str:
    """The part of an error line that names today's path of a retired ``_target_`` (empty for any other path)."""
    now = current_target(path)
    return "" if now == path else f"; {path} was renamed to {now} (cts/compat/{TABLE})"


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
        was = moved(value, rename.old, rename.new)
        return f"{prefix}{key}={current_target(value)}" if key.split(".")[-1] == "_target_" and was != value else None
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
