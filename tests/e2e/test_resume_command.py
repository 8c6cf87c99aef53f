"""The printed resume command runs as printed, from any directory: this Python, the absolute path of
run.py, every argument shell-quoted, the dir Hydra-quoted; a multirun prints one command for the sweep."""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import pickle
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from cts._util.interrupt import hydra_quote, recorded_sweep, resume_command
from cts._util.launch import RECORD_FILE, Launch, sweep_record
from cts.core.records import read_records
from cts.protocol.outcome import JobIncomplete, Outcome, finish
from tests.llm_fakes import protocol_reply
from tests.llm_server import Reply
from tests.prewarmed import run_script
from tests.runs import REPO, clone_env, fresh_clone, job_runs, sweep_dirs


def _parsed(override: str) -> object:
    return OverridesParser.create().parse_override(override).value()


@pytest.mark.parametrize("value", ["/o/clarifier=gpt,k=1", "/o/a b", "/o/it's", '/o/"q"', "/o/ü", "/o/x\\", "/o/plain"])
def test_hydra_quoting_reads_back_the_same_value(value: str) -> None:
    assert _parsed(f"hydra.run.dir={hydra_quote(value)}") == value


def test_a_job_dir_holding_equals_and_commas_survives_the_shell_and_hydra(tmp_path: Path) -> None:
    job_dir = tmp_path / "multirun" / "clarifier=gpt,k=1"
    argv = shlex.split(resume_command(["clarifier=gpt", "dataset.path=a b.jsonl"], job_dir, script="run.py"))
    assert argv[:2] == [sys.executable, os.path.abspath("run.py")]
    assert argv[2:4] == ["clarifier=gpt", "dataset.path=a b.jsonl"]
    assert argv[4].startswith("hydra.run.dir=") and _parsed(argv[4]) == str(job_dir)


def test_a_relative_dir_and_script_become_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(resume_command(["-m", "k=1,2"], Path("x"), "outputs/multirun/d", script="run.py"))
    assert argv[1] == str(tmp_path / "run.py") and argv[-1] == f"hydra.sweep.dir={tmp_path}/outputs/multirun/d"


@pytest.fixture
def launching():  # noqa: ANN201 - begins a sweep's launch as the launching process does, and ends it after the test
    with contextlib.ExitStack() as launches:

        def begin(sweep: Path, argv: list[str], swept: tuple[str, ...] = ("k",)) -> str:
            launch = Launch.begin(str(sweep), swept, resume_command(argv, sweep, str(sweep)), multirun=True)
            return launches.enter_context(launch.bound()).record.resume

        yield begin


def test_the_jobs_of_a_sweep_resume_with_the_sweep_command(tmp_path: Path, launching) -> None:
    sweep = tmp_path / "sweep"
    command = launching(sweep, ["-m", "clarifier=gpt,claude", "k=1,2", f"hydra.sweep.dir={tmp_path}/old"])
    assert shlex.split(command)[2:] == ["-m", "clarifier=gpt,claude", "k=1,2", f"hydra.sweep.dir={sweep}"]
    assert resume_command(["clarifier=gpt", "k=1"], sweep / "clarifier=gpt,k=1", str(sweep)) == command
    assert recorded_sweep(str(tmp_path / "other")) is None  # another sweep builds its own
    other = shlex.split(resume_command(["k=1"], tmp_path / "j", str(tmp_path / "other")))
    assert other[2:] == ["-m", "k=1", f"hydra.sweep.dir={tmp_path / 'other'}"]


def test_a_job_in_another_process_reads_the_sweep_record_from_the_sweep_dir(tmp_path: Path, launching) -> None:
    sweep = tmp_path / "sweep"
    command = launching(sweep, ["-m", "clarifier=gpt,claude", "k=1,2"], ("clarifier", "k"))
    assert sweep_record(str(sweep)) is not None and not (sweep / RECORD_FILE).exists()  # in-process: nothing written
    record = sweep_record(str(sweep))
    assert record is not None
    record.write()

    def in_a_worker() -> None:  # as a joblib or Slurm worker sees it: no launch in its process
        assert json.loads((sweep / RECORD_FILE).read_text()) == {"swept": ["clarifier", "k"], "resume": command}
        assert recorded_sweep(str(sweep)) == command and sweep_record(str(sweep)) == record
        assert sweep_record(str(tmp_path / "other")) is None

    contextvars.Context().run(in_a_worker)


def test_an_incomplete_job_of_a_sweep_names_the_sweep_command_once(tmp_path: Path, launching, capsys) -> None:
    sweep = tmp_path / "sweep"
    command = launching(sweep, ["-m", "k=1,2"])
    outcome = Outcome("infra", 5, 3, ({"id": "i1", "stage": "clarify", "kind": "infra", "endpoint": "e"},))
    with pytest.raises(JobIncomplete) as raised:
        finish(outcome, [], sweep / "k=1", "the job's own command", multirun=True)
    error = raised.value
    assert error.resume == command and str(error).count("Resume with: ") == 1 and str(error).endswith(command)
    assert "Resume with" not in capsys.readouterr().err  # what is missing is printed; the command is not
    again = pickle.loads(pickle.dumps(error))  # how a joblib worker hands it back
    assert (again.headline, again.resume, str(again)) == (error.headline, error.resume, str(error))
    with pytest.raises(JobIncomplete, match="Resume with: the job's own command$"):  # a dir outside the sweep
        finish(outcome, [], tmp_path / "elsewhere", "the job's own command", multirun=True)


def _lines_with(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


@pytest.mark.slow
def test_a_sweep_whose_jobs_failed_on_infrastructure_prints_one_command_that_runs_from_anywhere(
    tmp_path, llm_server, cache_dir
):
    clone, elsewhere = fresh_clone(tmp_path), tmp_path / "elsewhere"
    elsewhere.mkdir()
    llm_server.handler = lambda body: Reply.error(500, "overloaded")  # the probe (GET) still answers
    args = [
        "-m",
        "experiment=offline",
        "clarifier=gpt",
        "k=1,2,3",
        "limit=3",
        f"services.llm.api_base={llm_server.base_url}",
        "services.llm.max_attempts=1",
        f"services.llm.cache.path={tmp_path}/llm.sqlite",
        "services.llm.preflight_completion=false",
    ]  # the endpoint fails mid-run, not at the pre-flight
    env = clone_env(cache_dir)
    proc = run_script(["run.py", *args], cwd=clone, env=env, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert len(_lines_with(out, "INCOMPLETE: 0 of 3")) == 3 and "3 of 3 jobs failed" in out, out[-3000:]
    (line,) = _lines_with(out, "Resume with: ")  # once, for the whole sweep
    (sweep,) = sweep_dirs(clone)
    command = line.split("Resume with: ", 1)[1]
    assert shlex.split(command) == [sys.executable, str(clone / "run.py"), *args, f"hydra.sweep.dir={sweep}"]

    llm_server.handler = protocol_reply  # the endpoint is back: the printed line, as printed, finishes the sweep
    done = subprocess.run(command, shell=True, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sweep_dirs(clone) == [sweep] and not (elsewhere / "outputs").exists()
    for k in (1, 2, 3):
        ids = [r.id for r in read_records(sweep / f"k={k}" / "records.jsonl")]
        assert len(ids) == len(set(ids)) == 3
    runs = job_runs(clone)  # the same three runs, now finished
    assert len(runs) == 3 and set(runs["status"]) == {"FINISHED"} and runs["tags.cts.job_dir"].is_unique
    assert "(3 jobs)" in (sweep / "report" / "report.md").read_text()


@pytest.mark.slow
def test_a_single_job_in_a_dir_with_equals_and_commas_resumes_from_another_directory(tmp_path, llm_server, cache_dir):
    elsewhere, job_dir = tmp_path / "elsewhere", tmp_path / "runs" / "clarifier=gpt,k=1"
    elsewhere.mkdir()
    llm_server.handler = lambda body: Reply.error(500, "overloaded")
    args = [
        "experiment=offline",
        "clarifier=gpt",
        "limit=3",
        f"services.llm.api_base={llm_server.base_url}",
        "services.llm.max_attempts=1",
        f"services.llm.cache.path={tmp_path}/llm.sqlite",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        "services.llm.preflight_completion=false",
        f'hydra.run.dir="{job_dir}"',
    ]
    env = clone_env(cache_dir)
    proc = run_script(
        [str(REPO / "run.py"), *args],
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    command = proc.stderr.strip().splitlines()[-1].split("Resume with: ", 1)[1]
    llm_server.handler = protocol_reply
    done = subprocess.run(command, shell=True, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len({r.id for r in read_records(job_dir / "records.jsonl")}) == 3
    assert json.loads((job_dir / "summary.json").read_text())["metrics"]["n_instances"] == 3
