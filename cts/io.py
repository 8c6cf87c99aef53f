"""Atomic writes: files and directories that readers never see half-written."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` so that readers never see a partial file.

    The text goes to a temporary file in the same directory, is flushed to disk
    and then renamed over ``path``.

    Args:
        path: Destination; parent directories are created.
        text: The full file content.
    """
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_jsonl(
    rows: Iterable[Mapping[str, Any]],
    path: str | Path,
    default: Callable[[Any], Any] | None = None,
) -> None:
    """Atomically write JSON objects one per line, UTF-8, non-ASCII kept as is.

    Args:
        rows: JSON-serialisable objects.
        path: Destination file.
        default: ``json.dumps`` fallback for other objects (None = raise TypeError).
    """
    text = "".join(json.dumps(r, ensure_ascii=False, default=default) + "\n" for r in rows)
    atomic_write_text(path, text)


@contextmanager
def atomic_dir(final: Path, *, replace: bool = True) -> Iterator[Path]:
    """Yield a fresh temporary directory that becomes ``final`` on success.

    Directory renames are atomic, so readers see either no directory, the old
    one or the new complete one, never a partial one.

    Args:
        final: The directory to create.
        replace: Replace an existing ``final``; otherwise an existing one (e.g.
            installed meanwhile by a concurrent builder) is kept and ours dropped.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared
    try:
        yield tmp
        _swap_in(tmp, final, replace)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _swap_in(tmp: Path, final: Path, replace: bool) -> None:
    try:
        os.rename(tmp, final)
        return
    except OSError:
        if not replace:
            log.info("%s exists (a concurrent builder won); keeping it", final)
            return
    trash = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=final.parent))
    try:
        os.replace(final, trash / "old")
    except OSError:
        pass  # another process moved it away already
    try:
        os.rename(tmp, final)
    except OSError:
        log.info("another process installed %s first; keeping theirs", final)
    shutil.rmtree(trash, ignore_errors=True)
