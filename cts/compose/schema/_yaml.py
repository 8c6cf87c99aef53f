"""The yaml defaults under ``conf/`` from the schema: which file holds a key, and the line a missing key gets.

Hydra composes the yaml, so a key with a default is in the yaml too; it is written there from
its schema field (``python -m cts.compose.schema``), never by hand: a missing key gets one line
``name: default  # meaning`` at the end of its node, and the comments around it stay.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from cts.compose.schema._keys import UNSET, KeyInfo
from cts.compose.schema._table import KEYS

PRESET = "# @package _global_"
"""The first line of a preset (``experiment=offline``, ``task=score_answers``): it overrides defaults on purpose."""


def mount_of(path: Path, conf: Path) -> str:
    """The package a conf file is composed at: its ``# @package`` line, its binding in config.yaml, or its group."""
    first = path.read_text(encoding="utf-8").partition("\n")[0]
    if first.startswith("# @package"):
        return first.split()[-1]
    group = path.parent.relative_to(conf).as_posix()
    if group == ".":
        return ""
    listed = yaml.safe_load((conf / "config.yaml").read_text(encoding="utf-8"))["defaults"]
    bound = [next(iter(d)) for d in listed if isinstance(d, dict)]
    packages = dict(b.split("@", 1) for b in bound if "@" in b)
    return packages.get(group, group.replace("/", "."))


def default_files(conf: Path) -> dict[Path, str]:
    """Every conf file that holds defaults (not a preset), with its mount."""
    files = sorted(p for p in conf.rglob("*.yaml") if not p.read_text(encoding="utf-8").startswith(PRESET))
    return {p: mount_of(p, conf) for p in files}


def owned(files: Mapping[Path, str], keys: tuple[KeyInfo, ...] = KEYS) -> Iterator[tuple[Path, KeyInfo]]:
    """(file, key) for every key with a default and the files whose mount is the key's nearest node."""
    mounts = set(files.values()) - {"_global_"}
    for k in keys:
        if k.default is UNSET or "*" in k.path or k.path in mounts:
            continue
        nearest = max((m for m in mounts if m == "" or k.path.startswith(m + ".")), key=len)
        yield from ((path, k) for path, mount in files.items() if mount == nearest)


def relative(path: str, mount: str) -> list[str]:
    """``path``'s parts below ``mount``."""
    return (path[len(mount) + 1 :] if mount else path).split(".")


def has(data: Any, parts: list[str]) -> bool:
    """Whether the yaml ``data`` holds the key ``parts``."""
    for part in parts:
        if not isinstance(data, Mapping) or part not in data:
            return False
        data = data[part]
    return True


def flow(value: Any) -> str:
    """``value`` as one line of yaml (``null``, ``true``, ``[]``, ``{ua: 60.0}``)."""
    return str(yaml.safe_dump(value, default_flow_style=True, width=1 << 20)).strip().removesuffix("...").strip()


def with_key(text: str, parts: list[str], k: KeyInfo) -> str:
    """``text`` (a yaml file) with the key ``parts`` added at the end of its nearest existing node."""
    lines = text.rstrip("\n").split("\n")
    data = yaml.safe_load(text) or {}
    end, indent, depth = len(lines), 0, 0
    start = 0
    while depth < len(parts) - 1 and has(data, parts[: depth + 1]):
        start = next(i for i in range(start, end) if lines[i].startswith(" " * indent + parts[depth] + ":"))
        block = (i for i in range(start + 1, end) if lines[i].strip() and not lines[i].startswith(" " * (indent + 1)))
        end = next(block, end)
        while end - 1 > start and not lines[end - 1].strip():
            end -= 1
        depth, indent = depth + 1, indent + 2
    new = [" " * (indent + 2 * i) + f"{p}:" for i, p in enumerate(parts[depth:-1])]
    leaf = " " * (indent + 2 * (len(parts) - 1 - depth)) + f"{parts[-1]}: {flow(k.default)}"
    new.append(f"{leaf}  # {k.meaning}")
    return "\n".join([*lines[:end], *new, *lines[end:]]) + "\n"


def write_missing(conf: Path) -> list[str]:
    """Write every schema default that a conf file lacks into it; what was written (``file: key``)."""
    files = default_files(conf)
    written = []
    for path, k in owned(files):
        parts = relative(k.path, files[path])
        text = path.read_text(encoding="utf-8")
        if not has(yaml.safe_load(text) or {}, parts):
            path.write_text(with_key(text, parts, k), encoding="utf-8")
            written.append(f"{path.relative_to(conf.parent)}: {k.path}")
    return written
