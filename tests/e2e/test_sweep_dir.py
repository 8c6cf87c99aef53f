"""One sweep, one dir: the sweep dir is resolved once per multirun, whatever the launcher, and its report
covers every job (a report that finds none is an error, exit 1).

The commands run from a fresh copy of the repo with no ``hydra.*.dir`` override, so ``outputs/`` is the
default (``fresh_clone``; the other sweep tests import it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cts import tracking
from cts.compose.launch.jobs import pin_sweep_dir
from cts.compose.launch.report import report_or_exit
from cts.core.errors import ReportFailed
from cts.report import ReportResult
from tests.prewarmed import run_script
from tests.runs import clone_env, fresh_clone, job_runs, sweep_dirs

README_SWEEP = ("-m", "experiment=offline", "clarifier=rules_scope,rules_region,none", "k=1,2,3")


# The README's sweep typed as written (9 jobs in one dir, one report, every run's job dir in it)
# runs verbatim from the README in tests/e2e/test_readme.py.


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["cts", "basic", "joblib"])
def test_every_launcher_resolves_the_sweep_dir_once(tmp_path, cache_dir, launcher):
    """Microseconds in the dir: resolved per job, no two jobs would share it."""
    clone = fresh_clone(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = [
        *README_SWEEP,
        "limit=3",
        f"hydra/launcher={launcher}",
        "hydra.sweep.dir=outputs/multirun/${now:%Y-%m-%d_%H-%M-%S_%f}",
    ]
    proc = run_script(
        [str(clone / "run.py"), *args],
        cwd=elsewhere,
        env=clone_env(cache_dir),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sweep,) = [p for p in (elsewhere / "outputs" / "multirun").iterdir()]  # relative to where it was typed
    assert len(list(sweep.glob("*/summary.json"))) == 9 and (sweep / "multirun.yaml").is_file()
    assert "(9 jobs)" in (sweep / "report" / "report.md").read_text()


@pytest.mark.slow
def test_a_report_that_finds_no_job_exits_1_with_an_error_line(tmp_path, cache_dir):
    clone = fresh_clone(tmp_path)
    args = ["-m", "experiment=offline", "k=1,2", "limit=2", "hydra.sweep.subdir=../../elsewhere/job${hydra:job.num}"]
    proc = run_script(
        ["run.py", *args],
        cwd=clone,
        env=clone_env(cache_dir),
        timeout=600,
    )
    (sweep,) = sweep_dirs(clone)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == f"error: sweep report: no finished job found in {sweep}"
    assert "Traceback" not in proc.stderr
    assert len(list((clone / "outputs" / "elsewhere").glob("job*/summary.json"))) == 2  # the jobs ran


def _sweep_config(sweep_dir: str, hydra_overrides: list[str]):  # noqa: ANN202 - a DictConfig
    return OmegaConf.create(
        {
            "hydra": {"sweep": {"dir": sweep_dir}, "overrides": {"hydra": hydra_overrides}},
            "bootstrap": {"n_resamples": 10, "confidence": 0.95},
            "seed": 0,
        }
    )


def test_the_pinned_dir_replaces_the_given_one_and_keeps_other_overrides_unresolved(tmp_path, monkeypatch):
    from hydra.core.utils import setup_globals

    setup_globals()  # Hydra's ${now:}
    monkeypatch.chdir(tmp_path)
    config = _sweep_config("out/${now:%f}", ["hydra.sweep.dir=out/${now:%f}", "hydra.sweep.subdir=j${hydra:job.num}"])
    OmegaConf.set_readonly(config.hydra, True)  # as Hydra hands it over
    pinned = pin_sweep_dir(config)
    assert Path(pinned).parent == tmp_path / "out" and config.hydra.sweep.dir == pinned  # absolute, fixed
    given = OmegaConf.to_container(config.hydra.overrides.hydra, resolve=False)
    assert given == ["hydra.sweep.subdir=j${hydra:job.num}", f"hydra.sweep.dir={pinned}"]


def test_a_pinned_dir_holding_a_comma_is_quoted_for_hydra(tmp_path, monkeypatch):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    config = _sweep_config(str(tmp_path / "a=b,c d"), [])
    pin_sweep_dir(config)
    (override,) = OmegaConf.to_container(config.hydra.overrides.hydra)
    assert OverridesParser.create().parse_override(override).value() == str(tmp_path / "a=b,c d")


def test_a_report_without_every_job_of_the_sweep_is_an_error(tmp_path, monkeypatch):
    import cts.compose.launch.report

    config = _sweep_config(str(tmp_path), [])
    with pytest.raises(ReportFailed, match=f"^error: sweep report: no finished job found in {tmp_path}$"):
        report_or_exit(config, 2)
    (tmp_path / "job0").mkdir()
    (tmp_path / "job0" / "summary.json").write_text("{}")
    monkeypatch.setattr(
        cts.compose.launch.report, "build_report", lambda c: ReportResult(str(tmp_path), tmp_path / "report")
    )
    with pytest.raises(
        ReportFailed, match=f"^error: sweep report: only 1 of the sweep's 2 jobs finished in {tmp_path}$"
    ):
        report_or_exit(config, 2)
    assert report_or_exit(config, 1) == tmp_path / "report"
    monkeypatch.setattr(
        cts.compose.launch.report, "build_report", lambda c: ReportResult(str(tmp_path), None, errors=("E: x",))
    )
    with pytest.raises(ReportFailed, match="^error: sweep report: E: x$"):
        report_or_exit(config, 1)


def test_the_sweep_end_says_once_where_the_report_is(tmp_path, caplog):
    import logging

    from cts.compose.launch.report import build_report
    from tests.report.fakes import make_records, write_job

    sweep = tmp_path / "sweep"
    write_job(sweep, "none", 1, make_records(1, [10.0, 20.0, 30.0, 40.0]))
    write_job(sweep, "rules_scope", 1, make_records(1, [20.0, 20.0, 40.0, 40.0]))
    config = OmegaConf.merge(
        _sweep_config(str(sweep), []),
        {"tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "once"}},
    )
    with caplog.at_level(logging.INFO):
        result = build_report(config)
    assert result.ok, result.errors
    said = [r.getMessage() for r in caplog.records if "report" in r.getMessage() and "written" in r.getMessage()]
    assert said == [f"sweep report (2 jobs) written to {sweep / 'report'}"]
