"""Places that truly cannot be written, for tests that run as a user or as root.

Permission bits stop a user but not root (CI runs the tests as root), so a dir is made
read-only by the first technique that holds here, each checked by trying to write:
``chmod`` (not root), ``chattr +i`` (root on ext4/xfs/btrfs), a read-only bind mount in a
user namespace (``unshare -rm``, which applies to the command it starts). A full disk is
a small tmpfs mounted the same way. A test that finds none of them is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

Wrap = Callable[[Sequence[str]], list[str]]
"""Turns a command into the command that runs it with the fault in place."""


def _refuses_writes(path: Path, wrap: Wrap = list) -> bool:
    probe = path / ".probe"
    proc = subprocess.run(wrap(["sh", "-c", f"touch {shlex.quote(str(probe))}"]), capture_output=True, check=False)
    if proc.returncode == 0:
        probe.unlink(missing_ok=True)
    return proc.returncode != 0


def _namespace(script: str) -> Wrap:
    """Run a command after ``script`` in a new user + mount namespace (the mounts vanish with it)."""
    return lambda argv: ["unshare", "-rm", "sh", "-c", f'{script} && exec "$@"', "sh", *argv]


def unshare_works() -> bool:
    """Whether user + mount namespaces can be made here (``unshare -rm``)."""
    if shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run(
            ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs none {shlex.quote(d)}"], capture_output=True, check=False
        )
    return proc.returncode == 0


@contextlib.contextmanager
def read_only(*paths: Path) -> Iterator[Wrap]:
    """Make the dirs ``paths`` (created if needed) read-only; yield how to run a command that sees them so.

    With ``chmod`` or ``chattr`` they are read-only for every process (the yielded wrapper
    changes nothing); with a bind mount only for commands run through the wrapper.
    """
    for p in paths:
        p.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in paths}
        for p in paths:
            p.chmod(0o555)
        try:
            yield list
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
        return
    if shutil.which("chattr") and all(
        subprocess.run(["chattr", "+i", str(p)], capture_output=True, check=False).returncode == 0 for p in paths
    ):
        try:
            if all(_refuses_writes(p) for p in paths):
                yield list
                return
        finally:
            for p in paths:
                subprocess.run(["chattr", "-i", str(p)], capture_output=True, check=False)
    mounts = " && ".join(
        f"mount --bind {q} {q} && mount -o remount,bind,ro {q}" for q in map(shlex.quote, map(str, paths))
    )
    if unshare_works() and all(_refuses_writes(p, _namespace(mounts)) for p in paths):
        yield _namespace(mounts)
        return
    pytest.skip("no way to make a dir read-only here: running as root, chattr +i refused, no user namespaces")


def full_disk(path: Path, size: str) -> Wrap:
    """Run a command with a ``size`` tmpfs (e.g. ``400k``) mounted at ``path``; skip when namespaces are refused.

    The tmpfs and its files vanish when the command ends: a test that needs them afterwards
    copies them out with :func:`and_then`.
    """
    if not unshare_works():
        pytest.skip("a full disk needs a small tmpfs in a user namespace (unshare -rm), refused here")
    path.mkdir(parents=True, exist_ok=True)
    return _namespace(f"mount -t tmpfs -o size={size} none {shlex.quote(str(path))}")


def and_then(argv: Sequence[str], *after: str) -> list[str]:
    """``argv``, then the shell commands ``after`` (run whatever argv's status), exiting with argv's status."""
    tail = "; ".join(after)
    return ["sh", "-c", f'"$@"; rc=$?; {tail}; exit $rc', "sh", *argv]
