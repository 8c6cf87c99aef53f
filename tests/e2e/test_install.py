"""The editable install (the README's ``pip install -e .``): a plain ``.pth`` of the checkout, quietly.

setuptools builds an editable wheel one of two ways: a ``.pth`` entry for a simple layout, or a
meta path finder, whose build emits a warning that pip prints on every install. The first is
chosen only with ``package-dir = {"" = "."}`` in ``pyproject.toml``; this test builds the
editable wheel of a copy of the project with the installed setuptools and reads what it holds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

BUILD = """
import sys, warnings
warnings.simplefilter("always")
from setuptools import build_meta
print(build_meta.build_editable(sys.argv[1]))
"""


@pytest.mark.slow
def test_the_editable_wheel_is_a_pth_of_the_checkout_and_its_build_warns_nothing(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, project / name)
    for name in ("cts", "hydra_plugins"):
        shutil.copytree(REPO / name, project / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    out.mkdir()
    built = subprocess.run(
        [sys.executable, "-c", BUILD, str(out)], cwd=project, capture_output=True, text=True, timeout=300
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert "Warning" not in built.stderr and "careful" not in built.stderr, built.stderr[-3000:]
    with zipfile.ZipFile(out / built.stdout.strip().splitlines()[-1]) as wheel:
        names = wheel.namelist()
        (pth,) = [n for n in names if n.endswith(".pth")]
        assert wheel.read(pth).decode().split() == [str(project.resolve())]
    assert not [n for n in names if "finder" in n], names  # no meta path finder module
