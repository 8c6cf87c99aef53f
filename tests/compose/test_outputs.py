"""Outputs that cannot be written end with one ``error:`` line naming the path, never a traceback.

A read-only run dir, parent or output root (single run and multirun) is refused before
Hydra opens its log file and before the MLflow store exists (cts.compose.validate); a disk that
fills during the job ends it with the ``error:`` line, what finished and the resume line;
no JSONL file (records, traces, spend) is ever left with a torn line (cts._util.io.LineFile).
Before: ``PermissionError`` / ``Unable to configure handler 'file'`` tracebacks after the
store was created, and ``OSError: [Errno 28]`` tracebacks with a torn ``traces.jsonl``.
Read-only dirs and full disks are real where the machine allows (tests/faults.py); the
in-process tests inject the failing write instead.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cts._util import io as cts_io
from cts._util.io import LineFile, UnwritableOutput, output_fault, unwritable_reason
from cts.compose.errors import problems_of, quiet_unwritable_logs
from cts.core.errors import exit_on_error
from cts.core.records import Record
from cts.protocol.job_files import RECORDS_FILE, TRACES_FILE, JobSink
from cts.protocol.spend import SPEND_FILE, _append
from tests import faults
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
OFFLINE = "experiment=offline"
ENOSPC = os.strerror(errno.ENOSPC)


def failing_writes(monkeypatch: pytest.MonkeyPatch, after: int, *, partial: bool = True) -> None:
    """``os.write`` in cts._util.io succeeds ``after`` times, then writes half (if ``partial``) and fails: a disk filling up."""
    real, calls = os.write, {"n": 0}

    def write(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] <= after:
            return real(fd, data)
        if partial and calls["n"] == after + 1 and len(data) > 1:
            return real(fd, data[: len(data) // 2])  # a short write: the next call finds the disk full
        raise OSError(errno.ENOSPC, ENOSPC)

    monkeypatch.setattr(cts_io.os, "write", write)


def ends_whole(path: Path) -> bool:
    data = path.read_bytes()
    return not data or data.endswith(b"\n")


def test_a_write_cut_short_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.jsonl"
    f = LineFile(path)
    f.write('{"a": 1}\n')
    failing_writes(monkeypatch, after=0)
    with pytest.raises(UnwritableOutput) as err:
        f.write('{"b": "' + "x" * 100 + '"}\n')
    assert err.value.filename == str(path) and err.value.errno == errno.ENOSPC
    assert path.read_text() == '{"a": 1}\n'
    monkeypatch.undo()
    f.write('{"c": 3}\n')
    f.close()
    assert path.read_text() == '{"a": 1}\n{"c": 3}\n'


def _record(i: int) -> Record:
    return Record(id=f"q{i}", k=1, questions=("q?",), answers=("a",))


def test_an_instance_is_written_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with JobSink(tmp_path) as sink:
        assert sink.write(_record(1), [{"turn": 1}, {"turn": 2}])
        failing_writes(monkeypatch, after=1)  # the traces of q2 are written, its record is not
        with pytest.raises(UnwritableOutput, match=RECORDS_FILE):
            sink.write(_record(2), [{"turn": 1}])
    records = (tmp_path / RECORDS_FILE).read_text().splitlines()
    assert [json.loads(r)["id"] for r in records] == ["q1"]
    assert len((tmp_path / TRACES_FILE).read_text().splitlines()) == 2  # q2's trace was taken back
    assert ends_whole(tmp_path / RECORDS_FILE) and ends_whole(tmp_path / TRACES_FILE)


def test_the_spend_ledger_never_holds_a_torn_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _append(tmp_path / SPEND_FILE, {"unrecorded_usd": 0.5})
    failing_writes(monkeypatch, after=0)
    with pytest.raises(UnwritableOutput, match=SPEND_FILE):
        _append(tmp_path / SPEND_FILE, {"unrecorded_usd": 0.25, "stop_reason": "spend_limit"})
    assert [json.loads(x) for x in (tmp_path / SPEND_FILE).read_text().splitlines()] == [{"unrecorded_usd": 0.5}]


def test_a_torn_tail_left_by_a_killed_job_is_cut_for_records_and_traces(tmp_path: Path) -> None:
    (tmp_path / RECORDS_FILE).write_text(_record(1).to_json() + '\n{"id": "q2", "k"')
    (tmp_path / TRACES_FILE).write_text('{"turn": 1}\n{"tu')
    with JobSink(tmp_path) as sink:
        sink.write(_record(3), [{"turn": 3}])
    assert [json.loads(x)["id"] for x in (tmp_path / RECORDS_FILE).read_text().splitlines()] == ["q1", "q3"]
    assert [json.loads(x) for x in (tmp_path / TRACES_FILE).read_text().splitlines()] == [{"turn": 1}, {"turn": 3}]


def test_a_writable_dir_passes_and_a_missing_one_is_judged_by_its_parent(tmp_path: Path) -> None:
    assert unwritable_reason(tmp_path) is None
    assert unwritable_reason(tmp_path / "a" / "b") is None
    assert not (tmp_path / "a").exists() and list(tmp_path.iterdir()) == []  # the probe left nothing


def test_a_dir_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    assert unwritable_reason(tmp_path / "f" / "runs") == (tmp_path / "f", "it is not a directory")


def test_the_dirs_a_task_registers_as_written_are_output_places(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from cts.compose.checks import output_places

    out = tmp_path / "archive" / "x"
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        built = compose(
            "config", overrides=["experiment=build_gold", "build_gold.instances=i", f"build_gold.out_dir={out}"]
        )
        evaluate = compose("config", overrides=[OFFLINE, f"+build_gold.out_dir={out}"])
    assert [(p.path, p.hint) for p in output_places(built) if p.key == "build_gold.out_dir"] == [
        (out.parent, "build_gold.out_dir=DIR")
    ]  # @task(writes=("build_gold.out_dir",)) on the task, not a test of its _target_'s name
    assert not [p for p in output_places(evaluate) if p.key == "build_gold.out_dir"]  # evaluate writes no archive
    with open_dict(built):
        built.task._target_ = "cts.tasks.nowhere.task"
    assert not [p for p in output_places(built) if p.key == "build_gold.out_dir"]  # its own error says why


def test_a_read_only_dir_is_refused_whoever_runs(tmp_path: Path) -> None:
    with faults.read_only(tmp_path / "ro") as wrap:
        if wrap(["x"]) != ["x"]:
            pytest.skip("read-only only inside a mount namespace here; the CLI tests cover it")
        where, reason = unwritable_reason(tmp_path / "ro" / "runs" / "x") or (None, "")
        assert where == tmp_path / "ro" and reason in (os.strerror(errno.EACCES), os.strerror(errno.EPERM))


def test_a_full_disk_is_refused_before_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing_writes(monkeypatch, after=0, partial=False)
    assert unwritable_reason(tmp_path) == (tmp_path, ENOSPC)
    monkeypatch.undo()
    real = os.fstatvfs
    monkeypatch.setattr(cts_io.os, "fstatvfs", lambda fd: os.statvfs_result((*real(fd)[:4], 10, *real(fd)[5:])))
    where, reason = unwritable_reason(tmp_path) or (None, "")
    assert where == tmp_path and reason.startswith(ENOSPC) and "KiB free" in reason


def test_output_faults_are_told_apart_from_bugs() -> None:
    assert output_fault(OSError(errno.ENOSPC, ENOSPC)) is not None  # a flush names no file
    assert output_fault(PermissionError(errno.EACCES, "Permission denied", "/x/run.log")) is not None
    assert output_fault(PermissionError(errno.EACCES, "Permission denied")) is None
    assert output_fault(OSError(errno.EBADF, "Bad file descriptor", "/x")) is None
    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = OSError(errno.EROFS, "Read-only file system", "/x/m.db")
    assert output_fault(wrapped) is wrapped.__cause__
    assert problems_of(UnwritableOutput(errno.ENOSPC, ENOSPC, "/x/records.jsonl")) == [
        f"/x/records.jsonl: cannot be written: {ENOSPC}"
    ]


def test_a_log_file_that_fills_up_says_so_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    handler = logging.FileHandler(tmp_path / "run.log")
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        quiet_unwritable_logs()

        class Full:
            def write(self, _: str) -> None:
                raise OSError(errno.ENOSPC, ENOSPC)

            def flush(self) -> None:
                pass

        handler.stream = Full()  # type: ignore[assignment]
        for _ in range(3):
            logging.getLogger("cts.test").warning("one more line")
    finally:
        root.removeHandler(handler)
    err = capsys.readouterr().err
    assert err.count("warning: ") == 1 and f"run.log: the log cannot be written ({ENOSPC})" in err
    assert "Traceback" not in err and "Logging error" not in err


def test_a_disk_that_fills_mid_job_ends_with_the_line_the_summary_and_the_resume(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hydra import compose, initialize_config_dir

    from cts.compose.app import run

    job = tmp_path / "job"
    overrides = [
        OFFLINE,
        "limit=12",
        "concurrency=1",
        f"paths.cache_dir={cache_dir}",
        f"paths.output_dir={job}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
    ]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    real = LineFile.write
    writes = {"n": 0}

    def fill_up(self: LineFile, text: str) -> None:
        if self.path.name == RECORDS_FILE:
            writes["n"] += 1
            if writes["n"] > 5:
                failing_writes(monkeypatch, after=0)
        real(self, text)

    monkeypatch.setattr(LineFile, "write", fill_up)
    with pytest.raises(SystemExit) as stop, exit_on_error():  # as run.py runs it
        run(cfg)
    err = capsys.readouterr().err
    assert f"error: {job / RECORDS_FILE}: cannot be written: {ENOSPC}" in err.splitlines()
    assert "cts: job INCOMPLETE: 5 of 12 instance(s) finished, 7 missing." in err
    assert "Resume with: " in str(stop.value.code) and "Traceback" not in err
    assert len((job / RECORDS_FILE).read_text().splitlines()) == 5
    assert all(ends_whole(p) for p in job.glob("*.jsonl"))
    monkeypatch.undo()
    assert run(cfg) is not None  # space freed: the same job dir finishes
    assert len((job / RECORDS_FILE).read_text().splitlines()) == 12


# --- the CLI ---------------------------------------------------------------------------------


def cli(
    tmp: Path,
    cache_dir: Path,
    *args: str,
    multirun: bool = False,
    wrap: faults.Wrap = list,
    after: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """``python run.py [-m] ARGS`` from ``tmp``, outputs under ``tmp/outputs``, run through ``wrap`` (a fault)."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    argv = [
        sys.executable,
        str(REPO / "run.py"),
        *(["-m"] if multirun else []),
        OFFLINE,
        *args,
        f"paths.output_root={tmp / 'outputs'}",
        f"paths.cache_dir={cache_dir}",
    ]
    if wrap is list and not after:  # no fault around it: forked warm (tests/prewarmed.py)
        return run_script(argv[1:], cwd=tmp, env=env, timeout=600)
    command = wrap(faults.and_then(argv, *after) if after else argv)
    return subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=600, check=False)


def one_clean_error(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert exit 1 with exactly one ``error:`` line and no traceback; return the line."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "Error executing job" not in out and "Unable to configure" not in out, out[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


READ_ONLY = (os.strerror(errno.EACCES), os.strerror(errno.EPERM), os.strerror(errno.EROFS))


def names_read_only(line: str, path: Path, key: str) -> None:
    assert line.startswith(f"error: {path}: cannot be written: "), line
    assert any(r in line for r in READ_ONLY) and f"{key}=DIR" in line, line


@pytest.mark.slow
def test_read_only_places_of_a_single_run_are_refused_before_anything(tmp_path: Path, cache_dir: Path) -> None:
    out = tmp_path / "outputs"
    run_dir = out / "runs" / "mine"
    with faults.read_only(run_dir) as wrap:  # the run dir itself (e.g. a resumed one)
        line = one_clean_error(cli(tmp_path, cache_dir, f"hydra.run.dir={run_dir}", wrap=wrap))
    names_read_only(line, run_dir, "hydra.run.dir")
    assert not (out / "mlflow.db").exists() and list(run_dir.iterdir()) == []
    with faults.read_only(out / "runs") as wrap:  # its parent: the default run dir cannot be made
        line = one_clean_error(cli(tmp_path, cache_dir, wrap=wrap))
    names_read_only(line, out / "runs", "hydra.run.dir")
    assert not (out / "mlflow.db").exists()
    with faults.read_only(out) as wrap:  # the output root: neither the store nor runs/ can be made
        line = one_clean_error(cli(tmp_path, cache_dir, wrap=wrap))
    names_read_only(line, out, "paths.output_root")
    assert sorted(p.name for p in out.iterdir()) == ["runs"]


@pytest.mark.slow
def test_read_only_places_of_a_multirun_are_refused_before_the_sweep(tmp_path: Path, cache_dir: Path) -> None:
    out, sweep = tmp_path / "outputs", tmp_path / "outputs" / "sweep"
    args = ("k=1,2", "sweep_report=false", f"hydra.sweep.dir={sweep}")
    with faults.read_only(out) as wrap:
        line = one_clean_error(cli(tmp_path, cache_dir, *args, multirun=True, wrap=wrap))
    names_read_only(line, out, "hydra.sweep.dir")
    with faults.read_only(sweep) as wrap:
        line = one_clean_error(cli(tmp_path, cache_dir, *args, multirun=True, wrap=wrap))
    names_read_only(line, sweep, "hydra.sweep.dir")
    assert not (out / "mlflow.db").exists()
    with faults.read_only(sweep / "k=2") as wrap:  # one job dir of a sweep being resumed
        line = one_clean_error(cli(tmp_path, cache_dir, *args, multirun=True, wrap=wrap))
    names_read_only(line, sweep / "k=2", "hydra.sweep.dir")
    assert not (sweep / "k=1").exists() and not (out / "mlflow.db").exists()


def _resume_args(stderr: str) -> list[str]:
    """The overrides of the printed ``Resume with: ... run.py ARGS`` command."""
    line = next(x for x in stderr.splitlines() if "Resume with: " in x)
    words = shlex.split(line.split("Resume with: ", 1)[1])
    return words[next(i for i, w in enumerate(words) if w.endswith("run.py")) + 1 :]


@pytest.mark.slow
def test_a_full_disk_in_the_job_dir_ends_cleanly_and_the_resume_finishes(tmp_path: Path, cache_dir: Path) -> None:
    run_dir, kept = tmp_path / "outputs" / "runs" / "full", tmp_path / "kept"
    disk = faults.full_disk(run_dir, "400k")  # the start needs 256 KiB free; 200 records need more
    q = shlex.quote
    argv = [
        sys.executable,
        str(REPO / "run.py"),
        OFFLINE,
        f"paths.output_root={tmp_path / 'outputs'}",
        f"paths.cache_dir={cache_dir}",
        f"hydra.run.dir={run_dir}",
    ]
    # In one mount namespace: the run fills the disk; its dir is copied out; the disk grows (space freed)
    # and the same command resumes into the same dir.
    script = (
        f'"$@" 2> {q(str(tmp_path / "first.err"))}; echo $? > {q(str(tmp_path / "first.rc"))}; '
        f"cp -a {q(str(run_dir))} {q(str(kept))}; mount -o remount,size=4m none {q(str(run_dir))} && "
        f'"$@" > /dev/null; rc=$?; cp {q(str(run_dir / RECORDS_FILE))} {q(str(tmp_path))}; exit $rc'
    )
    resumed = subprocess.run(
        disk(["sh", "-c", script, "sh", *argv]), cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False
    )
    first = subprocess.CompletedProcess(
        argv, int((tmp_path / "first.rc").read_text()), "", (tmp_path / "first.err").read_text()
    )
    line = one_clean_error(first)
    assert line.startswith(f"error: {run_dir}/") and line.endswith(f".jsonl: cannot be written: {ENOSPC}"), line
    done = len((kept / RECORDS_FILE).read_text().splitlines())
    assert 0 < done < 200
    assert f"cts: job INCOMPLETE: {done} of 200 instance(s) finished, {200 - done} missing." in first.stderr
    assert f"hydra.run.dir={run_dir}" in _resume_args(first.stderr)
    assert all(ends_whole(p) for p in kept.glob("*.jsonl")), [p.name for p in kept.glob("*.jsonl")]
    assert len({json.loads(x)["id"] for x in (kept / RECORDS_FILE).read_text().splitlines()}) == done
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert len({json.loads(x)["id"] for x in (tmp_path / RECORDS_FILE).read_text().splitlines()}) == 200


@pytest.mark.slow
def test_a_full_disk_in_a_sweep_fails_its_jobs_with_their_lines(tmp_path: Path, cache_dir: Path) -> None:
    sweep = tmp_path / "outputs" / "sweep"
    torn = f'for f in {shlex.quote(str(sweep))}/*/*.jsonl; do [ -s "$f" ] && [ "$(tail -c1 "$f" | wc -l)" = 0 ] && echo TORN $f; done'
    proc = cli(
        tmp_path,
        cache_dir,
        "k=1,2",
        "sweep_report=false",
        f"hydra.sweep.dir={sweep}",
        multirun=True,
        wrap=faults.full_disk(sweep, "700k"),
        after=(torn,),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out and "TORN" not in out, out[-3000:]
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error: ")]
    assert errors and all(
        x.startswith(f"error: {sweep}/k=") and x.endswith(f"cannot be written: {ENOSPC}") for x in errors
    ), errors
    assert "cts: job INCOMPLETE: " in proc.stderr and "Resume with: " in proc.stderr


@pytest.mark.slow
def test_runs_started_together_get_their_own_default_dirs(tmp_path: Path, cache_dir: Path) -> None:
    """Before, the run dir had one-second resolution: 6 runs started at once collided on one dir."""
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    argv = [
        sys.executable,
        str(REPO / "run.py"),
        OFFLINE,
        "limit=2",
        f"paths.output_root={tmp_path / 'outputs'}",
        f"paths.cache_dir={cache_dir}",
    ]
    procs = [
        subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    results = [(p.wait(timeout=600), p.stderr.read() if p.stderr else "") for p in procs]
    assert all(rc == 0 for rc, _ in results), [err[-1500:] for rc, err in results if rc]
    dirs = sorted((tmp_path / "outputs" / "runs").iterdir())
    assert len(dirs) == 6 and all(len((d / RECORDS_FILE).read_text().splitlines()) == 2 for d in dirs)
    pids = {p.pid for p in procs}
    assert {int(d.name.rsplit("-", 1)[1]) for d in dirs} == pids  # <date>_<time>.<microseconds>-<pid>
