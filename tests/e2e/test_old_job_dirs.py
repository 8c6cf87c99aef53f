"""A job dir written by the code before the package restructure resumes with today's code.

The old tree is ``git archive`` of the last commit of main before the restructure, run as a user
of that version would (its own ``run.py``, its package first on ``PYTHONPATH``). Today's ``run.py``
then resumes the same job dir with a larger ``limit``: the fingerprint must match, the finished
records stay as they were, only the new instances run, and every ``_target_`` the old dir names
resolves once its stored config is migrated (a stored path is part of what a later resume, report
or notebook reads). Old module paths do not import: ``cts/compat/`` renames them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra.utils import get_object

from cts.compat.config import migrate, migrate_job_config
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
OLD_COMMIT = "6216629"  # main before "Restructure: cts/ holds packages only" (03bcf8f)
_DROPPED = {"PROJECT_ROOT", "PYTHONPATH", "PYTHONHOME"}
_DROPPED_PREFIXES = ("CTS_", "HYDRA_", "MLFLOW_")


def _old_tree(dest: Path) -> Path:
    """The files of :data:`OLD_COMMIT` under ``dest`` (skips when this checkout lacks that history)."""
    git = ["git", "-C", str(REPO)]
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the pre-restructure tree cannot be read")
    if subprocess.run([*git, "cat-file", "-e", f"{OLD_COMMIT}^{{commit}}"], capture_output=True).returncode != 0:
        pytest.skip(f"commit {OLD_COMMIT} (main before the restructure) is not in this clone (shallow?)")
    dest.mkdir(parents=True)
    archive = subprocess.run([*git, "archive", OLD_COMMIT], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def _env(cache_dir: Path, pythonpath: Path | None = None) -> dict[str, str]:
    """A user's shell: no project or test variables, the session's data cache, ``pythonpath`` first."""
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED and not k.startswith(_DROPPED_PREFIXES)}
    env |= {"CTS_CACHE_DIR": str(cache_dir), "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    return env | ({"PYTHONPATH": str(pythonpath)} if pythonpath else {})


def _run(run_py: Path, args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_script([str(run_py), *args], cwd=cwd, env=env, timeout=600)


def _imported_from(env: dict[str, str], cwd: Path) -> dict[str, str]:
    """Where ``cts``, an old-only module and the Hydra plugins come from under ``env``."""
    code = (
        "import json, cts, cts.callbacks, hydra_plugins.cts_model_roles as p;"
        "print(json.dumps({'cts': cts.__file__, 'callbacks': cts.callbacks.__file__, 'plugins': p.__file__}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _targets(node: Any) -> Iterator[str]:
    """Every ``_target_`` value in a nested mapping or list."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "_target_" and isinstance(value, str):
                yield value
            else:
                yield from _targets(value)
    elif isinstance(node, list):
        for value in node:
            yield from _targets(value)


def _stored_configs(job_dir: Path) -> list[dict[str, Any]]:
    """A job dir's stored configs: its Hydra files, ``config.yaml`` and the fingerprint's protocol config."""
    docs = [
        yaml.safe_load((job_dir / n).read_text()) for n in (".hydra/hydra.yaml", ".hydra/config.yaml", "config.yaml")
    ]
    return [*docs, json.loads((job_dir / "fingerprint.json").read_text())["config"]]


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


@pytest.mark.slow
def test_a_pre_restructure_job_dir_resumes_with_todays_code(tmp_path: Path, cache_dir: Path) -> None:
    old = _old_tree(tmp_path / "old")
    job, where = tmp_path / "job", tmp_path / "cwd"
    where.mkdir()
    common = ["experiment=offline", f"hydra.run.dir={job}", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"]

    old_env = _env(cache_dir, pythonpath=old)
    # The editable install's finder comes after sys.path: the old tree's package is the one imported.
    assert all(Path(f).is_relative_to(old) for f in _imported_from(old_env, where).values())
    first = _run(old / "run.py", ["limit=3", *common], old_env, where)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    records, traces = _lines(job / "records.jsonl"), _lines(job / "traces.jsonl")
    stored = json.loads((job / "fingerprint.json").read_text())
    fingerprint, old_config = stored["fingerprint"], stored["config"]
    run_id = json.loads((job / "summary.json").read_text())["run_id"]
    configs = _stored_configs(job)
    assert len(records) == 3 and "cts.callbacks.PrepareTrackingStore" in {t for c in configs for t in _targets(c)}

    again = _run(REPO / "run.py", ["limit=6", *common], _env(cache_dir), where)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    now = _lines(job / "records.jsonl")
    assert now[:3] == records and len(now) == 6  # the finished records unchanged, byte for byte
    old_ids = {json.loads(r)["id"] for r in records}
    new_ids = {json.loads(r)["id"] for r in now[3:]}
    assert len(new_ids) == 3 and not new_ids & old_ids
    later = _lines(job / "traces.jsonl")
    assert later[: len(traces)] == traces
    assert {json.loads(t)["id"] for t in later[len(traces) :]} == new_ids  # only the new instances ran
    # The same protocol config, in today's names where a key was renamed since (cts/compat/).
    resumed = json.loads((job / "fingerprint.json").read_text())
    assert [*resumed.get("migrated_from", []), resumed["fingerprint"]][0] == fingerprint
    assert resumed["config"] == migrate(old_config) and (resumed["fingerprint"] == fingerprint) == (
        old_config == resumed["config"]
    )
    summary = json.loads((job / "summary.json").read_text())
    assert summary["run_id"] == run_id and summary["metrics"]["n_instances"] == 6  # the same MLflow run goes on
    # Every _target_ the old dir stored resolves in today's names; the old path itself no longer imports.
    with pytest.raises(ImportError):
        get_object("cts.callbacks.PrepareTrackingStore")
    migrated = {t for c in configs for t in _targets(migrate_job_config(c))}
    assert "cts.compose.callbacks.LaunchCallbacks" in migrated
    for target in sorted(migrated):
        assert get_object(target) is not None, target
