"""Writes readers never see half-done: atomic files and dirs, whole JSONL lines; unwritable places named.

A write that fails because the place cannot be written (disk full, read-only, no
permission) raises :class:`UnwritableOutput`, which names the file: the job then ends
with one line saying where and why (:mod:`cts.compose.errors`), not a traceback.
"""

from __future__ import annotations

import errno
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

OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})
"""Errors that say the place cannot be written (full, read-only, not allowed), not that the code is wrong."""
_NAMELESS_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
MIN_FREE_BYTES = 256 << 10
"""A run does not start where less space is free (Hydra's config files and log come first, about 20 KiB)."""


class UnwritableOutput(OSError):
    """An output file or dir cannot be written (disk full, read-only, no permission); ``filename`` names it."""


def output_fault(error: BaseException) -> OSError | None:
    """The unwritable-place error in ``error`` (itself or what it wraps), or None when it is something else.

    A full disk counts even when the failing call did not name its file (a buffered
    write's flush); a permission or read-only error only with the path it refused.
    """
    current: BaseException | None = error
    for _ in range(8):
        if current is None:
            return None
        if isinstance(current, UnwritableOutput):
            return current
        if (
            isinstance(current, OSError)
            and current.errno in OUTPUT_ERRNOS
            and (current.filename is not None or current.errno in _NAMELESS_ERRNOS)
        ):
            return current
        current = current.__cause__
    return None


def unwritable(error: OSError, path: str | Path) -> UnwritableOutput:
    """``error`` (raised while writing ``path``) as an :class:`UnwritableOutput` naming ``path``."""
    code = error.errno if error.errno is not None else errno.EIO
    return UnwritableOutput(code, error.strerror or os.strerror(code), str(path))


def unwritable_reason(directory: str | Path, files: Iterable[str] | None = ()) -> tuple[Path, str] | None:
    """Why ``directory`` cannot be written (or, before it exists, made in its nearest existing parent).

    Tried by creating and writing a small file there, then removing it: permission
    bits say nothing for root, and only a write tells a read-only or full disk.

    Args:
        directory: The dir a run will write in.
        files: Files in it the run appends to, when they exist (None: every file in it).

    Returns:
        None when it can be written; else the existing path that refused and why.
    """
    target = Path(directory).absolute()
    try:
        while not target.exists() and target.parent != target:
            target = target.parent
        if not target.is_dir():
            return target, "it is not a directory"
        fd, probe = tempfile.mkstemp(dir=target, prefix=".cts-write-probe-")
    except OSError as e:
        return target, e.strerror or str(e)
    try:
        if os.write(fd, b"x") != 1:
            return target, os.strerror(errno.ENOSPC)
        st = os.fstatvfs(fd)
    except OSError as e:
        return target, e.strerror or str(e)
    finally:
        os.close(fd)
        Path(probe).unlink(missing_ok=True)
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        need = MIN_FREE_BYTES >> 10
        return target, f"{os.strerror(errno.ENOSPC)} (only {free >> 10} KiB free; a run needs {need} KiB)"
    return _read_only_file(target, files) if target == Path(directory).absolute() else None


def _read_only_file(directory: Path, files: Iterable[str] | None) -> tuple[Path, str] | None:
    paths = [p for p in directory.iterdir() if p.is_file()] if files is None else [directory / f for f in files]
    bad = next((p for p in paths if p.is_file() and not os.access(p, os.W_OK)), None)
    return None if bad is None else (bad, "the file is read-only")


class LineFile:
    """A JSONL file written in whole lines: each :meth:`write` is one ``os.write``; a failed one leaves nothing.

    A write cut short (disk full, a file size limit) is truncated back, so the file
    never ends in half a line that a later append would glue onto.
    """

    def __init__(self, path: str | Path, *, truncate: bool = False) -> None:
        self.path = Path(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
        try:
            self.fd = os.open(self.path, flags, 0o666)
        except OSError as e:
            raise unwritable(e, self.path) from e

    def size(self) -> int:
        """The file's length now (a point :meth:`rewind` can go back to)."""
        return os.fstat(self.fd).st_size

    def write(self, text: str) -> None:
        """Append ``text`` (whole lines) at once, or not at all.

        Raises:
            UnwritableOutput: Naming the file; the file is as it was before the call.
        """
        data = text.encode("utf-8")
        start = self.size()
        try:
            done = 0
            while done < len(data):
                n = os.write(self.fd, data[done:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                done += n
        except OSError as e:
            self.rewind(start)
            raise unwritable(e, self.path) from e

    def rewind(self, size: int) -> None:
        """Cut the file back to ``size`` bytes (best effort: a failure leaves it longer, never torn mid-line)."""
        try:
            os.ftruncate(self.fd, size)
        except OSError:
            log.warning("%s: could not cut a failed write back to %d bytes", self.path, size)

    def close(self) -> None:
        """Close the file (writes are not buffered: nothing is left to flush)."""
        os.close(self.fd)


def append_line(path: str | Path, text: str) -> None:
    """Append whole line(s) ``text`` to ``path`` at once (see :class:`LineFile`)."""
    f = LineFile(path)
    try:
        f.write(text)
    finally:
        f.close()


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` so that readers never see a partial file.

    The text goes to a temporary file in the same directory, is flushed to disk
    and then renamed over ``path``.

    Args:
        path: Destination; parent directories are created.
        text: The full file content.
    """
    dest = Path(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    except OSError as e:
        if output_fault(e):
            raise unwritable(e, e.filename or dest) from e
        raise
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and output_fault(e):
            raise unwritable(e, dest) from e
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
