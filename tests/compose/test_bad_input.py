"""Bad input ends with exit 1 and one clean line per problem.

Fast tests call ``cts.compose.app.run`` in-process on a composed config (the code path of
``run.py``); ``slow`` ones run the real CLI (``python run.py``) and also check that
Hydra prints no traceback. Offline stack only, a few demo instances, a tmp MLflow store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cts.compose.errors import debug_requested, problems_of
from cts.core.errors import ResumeRefused, exit_on_error
from cts.data.jsonl import DatasetError, write_instances_jsonl
from cts.demo import load_demo
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
GOLD_OFFLINE = ("experiment=build_gold", "search=extractive", "extractor=rules")


def cli(tmp: Path, cache_dir: Path, *args: str, debug: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``python run.py ARGS`` in ``tmp`` with a tmp store; no HYDRA_FULL_ERROR unless ``debug``."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    n = len(list(tmp.glob("run-*")))
    base = [
        f"paths.cache_dir={cache_dir}",
        f"tracking.uri=sqlite:///{tmp / 'mlflow.db'}",
        f"hydra.run.dir={tmp}/run-{n}",
    ]
    return run_script(
        [str(REPO / "run.py"), *args, *base],
        cwd=tmp,
        env=env,
        timeout=300,
    )


def clean_failure(proc: subprocess.CompletedProcess[str], *expected: str) -> list[str]:
    """Assert exit 1, no traceback, and every expected text on an ``error:`` line; return those lines."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "Error executing job" not in out, out[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    for text in expected:
        assert any(text in line for line in errors), (text, proc.stderr[-3000:])
    return errors


@pytest.fixture(scope="module")
def rows(services, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Three demo instances as JSONL rows (the offline stack builds gold for them)."""
    path = tmp_path_factory.mktemp("rows") / "demo3.jsonl"
    write_instances_jsonl(
        load_demo(services.corpus, services.index, services.cache_dir, n=200, seed=0).instances[:3], path
    )
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def in_process(tmp: Path, cache_dir: Path, *overrides: str) -> list[str]:
    """Compose and run like ``run.py``; assert it exits with a message; return its ``error:`` lines."""
    from hydra import compose, initialize_config_dir

    from cts.compose.app import run

    n = len(list(tmp.glob("job-*")))
    base = [
        f"paths.cache_dir={cache_dir}",
        f"paths.output_dir={tmp}/job-{n}",
        f"tracking.uri=sqlite:///{tmp}/mlflow.db",
    ]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, *base])
    with pytest.raises(SystemExit) as stop, exit_on_error():  # as run.py runs it
        run(cfg)
    message = str(stop.value.code)
    assert stop.value.code not in (0, None) and "Traceback" not in message
    return [line for line in message.splitlines() if line.startswith("error: ")] or message.splitlines()


def test_bad_inputs_fail_at_load_with_one_line_per_problem(tmp_path: Path, cache_dir: Path, rows: list[dict]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    gold_path = f"dataset.gold_path={tmp_path / 'gold.jsonl'}"
    evaluate = ("experiment=offline", "dataset=jsonl")
    assert in_process(tmp_path, cache_dir, *evaluate, f"dataset.path={empty}", gold_path) == [
        f"error: {empty}: no instances (the file has no rows)"
    ]
    assert in_process(tmp_path, cache_dir, *GOLD_OFFLINE, f"build_gold.instances={empty}", "build_gold.out_dir=g") == [
        f"error: {empty}: no instances (the file has no rows)"
    ]
    bad = write_rows(
        tmp_path / "bad.jsonl", [rows[0], {**rows[1], "blurred_query": 5}, {**rows[2], "fused_query": "长" * 300}]
    )
    assert in_process(
        tmp_path, cache_dir, *evaluate, f"dataset.path={bad}", gold_path, "dataset.max_field_chars=200"
    ) == [
        f"error: {bad}:2: blurred_query: must be a string, got int",
        f"error: {bad}:3: fused_query: 300 characters, longer than max_field_chars=200",
    ]
    assert in_process(tmp_path, cache_dir, *evaluate, f"dataset.path={bad}") == [
        "error: dataset.gold_path: missing mandatory value; set it on the command line: dataset.gold_path=..."
    ]
    assert in_process(tmp_path, cache_dir, *GOLD_OFFLINE) == [
        "error: build_gold.instances: missing mandatory value; set it on the command line: build_gold.instances=...",
        "error: build_gold.out_dir: missing mandatory value; set it on the command line: build_gold.out_dir=...",
    ]


def test_gold_partial_refusal_and_field_mapping_in_process(tmp_path: Path, cache_dir: Path, rows: list[dict]) -> None:
    nonsense = {"qid": "nope", "blurred_query": "xqzv", "fused_query": "xqzv wprt kkzq"}  # no corpus match
    data = write_rows(
        tmp_path / "data.jsonl", [{"qid" if k == "id" else k: v for k, v in r.items()} for r in [*rows[:1], nonsense]]
    )
    gold = (
        *GOLD_OFFLINE,
        "dataset.fields.id=qid",
        f"build_gold.instances={data}",
        f"build_gold.out_dir={tmp_path / 'g'}",
    )
    lines = in_process(tmp_path, cache_dir, *gold)
    assert (
        lines[0]
        == f"build_gold: 1 of 2 instance(s) have no gold (invalid gold: 1); reasons in {tmp_path / 'g' / 'failures.jsonl'}"
    )
    assert "build_gold.allow_partial=true" in lines[1] and "dataset.only_with_gold=true" in lines[1]
    (refusal,) = in_process(tmp_path, cache_dir, *gold)
    assert "a gold archive exists" in refusal and "set build_gold.overwrite=true on the command line" in refusal


@pytest.mark.slow
def test_empty_dataset_is_a_load_time_error(tmp_path: Path, cache_dir: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    proc = cli(
        tmp_path,
        cache_dir,
        "experiment=offline",
        "dataset=jsonl",
        f"dataset.path={empty}",
        f"dataset.gold_path={tmp_path / 'gold.jsonl'}",
    )
    clean_failure(proc, f"{empty}: no instances")
    gold = cli(
        tmp_path, cache_dir, *GOLD_OFFLINE, f"build_gold.instances={empty}", f"build_gold.out_dir={tmp_path / 'g'}"
    )
    clean_failure(gold, f"{empty}: no instances")
    assert not (tmp_path / "g").exists()


@pytest.mark.slow
def test_bad_rows_one_line_each_with_file_and_line(tmp_path: Path, cache_dir: Path, rows: list[dict]) -> None:
    bad = write_rows(
        tmp_path / "bad.jsonl", [rows[0], {**rows[1], "blurred_query": 5}, {**rows[2], "fused_query": "长" * 300}]
    )
    proc = cli(
        tmp_path,
        cache_dir,
        "experiment=offline",
        "dataset=jsonl",
        f"dataset.path={bad}",
        f"dataset.gold_path={tmp_path / 'gold.jsonl'}",
        "dataset.max_field_chars=200",
    )
    errors = clean_failure(
        proc,
        f"{bad}:2: blurred_query: must be a string, got int",
        f"{bad}:3: fused_query: 300 characters, longer than max_field_chars=200",
    )
    assert len(errors) == 2 and "\\n" not in proc.stderr


@pytest.mark.slow
def test_missing_gold_path_names_the_key_and_debug_shows_the_error(tmp_path: Path, cache_dir: Path) -> None:
    args = ("experiment=offline", "dataset=jsonl", f"dataset.path={tmp_path / 'x.jsonl'}")
    clean_failure(
        cli(tmp_path, cache_dir, *args),
        "dataset.gold_path: missing mandatory value",
    )
    debug = cli(tmp_path, cache_dir, *args, "debug=true")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "dataset.gold_path" in debug.stderr


@pytest.mark.slow
def test_partial_gold_field_mapping_overwrite_and_only_with_gold(
    tmp_path: Path, cache_dir: Path, rows: list[dict]
) -> None:
    # One mapping for both commands: the file's id column is "qid".
    nonsense = {"id": "nope", "blurred_query": "xqzv", "fused_query": "xqzv wprt kkzq"}  # no corpus match
    data = write_rows(
        tmp_path / "data.jsonl", [{"qid" if k == "id" else k: v for k, v in r.items()} for r in [*rows, nonsense]]
    )
    out = tmp_path / "gold"
    gold = (*GOLD_OFFLINE, "dataset.fields.id=qid", f"build_gold.instances={data}", f"build_gold.out_dir={out}")
    first = cli(tmp_path, cache_dir, *gold)
    assert first.returncode == 1, first.stderr[-3000:]
    assert "build_gold: 1 of 4 instance(s) have no gold (invalid gold: 1)" in first.stderr
    assert "build_gold.allow_partial=true" in first.stderr and "Traceback" not in first.stderr
    assert "no gold for nope: invalid gold" in first.stdout
    clean_failure(cli(tmp_path, cache_dir, *gold), "a gold archive exists", "build_gold.overwrite=true")
    accepted = cli(tmp_path, cache_dir, *gold, "build_gold.overwrite=true", "build_gold.allow_partial=true")
    assert accepted.returncode == 0, accepted.stderr[-3000:]

    evaluate = (
        "experiment=offline",
        "dataset=jsonl",
        "dataset.fields.id=qid",
        f"dataset.path={data}",
        f"dataset.gold_path={out / 'gold.jsonl'}",
        "limit=4",
    )
    clean_failure(
        cli(tmp_path, cache_dir, *evaluate),
        "no gold for 1 of 4 instance(s): nope",
        f"why: see {out / 'failures.jsonl'}",
        "dataset.only_with_gold=true",
    )
    ok = cli(tmp_path, cache_dir, *evaluate, "dataset.only_with_gold=true")
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "1 of 4 instance(s) have no gold and are left out" in ok.stdout + ok.stderr
    summary = json.loads(next(tmp_path.glob("run-*/summary.json")).read_text())
    assert summary["metrics"]["n_without_gold"] == 1 and summary["metrics"]["n_instances"] == 3


def test_problem_lines_never_hold_a_newline() -> None:
    err = DatasetError(["f.jsonl:4: blurred_query: must be a string, got int", "f.jsonl:5: id: missing"])
    assert problems_of(err) == err.problems
    assert problems_of(FileExistsError("a\nb")) == ["a b"]


def test_debug_is_asked_for_by_the_env_or_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from omegaconf import OmegaConf

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    assert not debug_requested(OmegaConf.create({"debug": False}))
    assert debug_requested(OmegaConf.create({"debug": True}))
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    assert debug_requested(None)


def test_a_refused_resume_lists_the_keys_that_differ(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir

    from cts.compose.job_config import protocol_config, protocol_fingerprint
    from cts.tasks.job import check_resume

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        old, new = (compose("config", overrides=["experiment=offline", *o]) for o in ([], ["k=2", "judge.full=0.9"]))
    check_resume(tmp_path, protocol_fingerprint(old), protocol_config(old))
    (tmp_path / "records.jsonl").write_text('{"id": "a"}\n', encoding="utf-8")
    with pytest.raises(ResumeRefused) as stop:
        check_resume(tmp_path, protocol_fingerprint(new), protocol_config(new))
    message = stop.value.message
    assert "holds records of another configuration" in message
    assert message.splitlines()[1:] == ["Keys that differ (stored -> now):", "  judge.full: 0.8 -> 0.9", "  k: 1 -> 2"]
    check_resume(tmp_path, protocol_fingerprint(old), protocol_config(old))  # the same config resumes


def test_a_dir_without_records_takes_the_new_configuration(tmp_path: Path) -> None:
    from cts.tasks.job import check_resume

    check_resume(tmp_path, "aaaa", {"k": 1})
    check_resume(tmp_path, "bbbb", {"k": 2})  # a run that failed before its first record protects nothing
    assert json.loads((tmp_path / "fingerprint.json").read_text()) == {"fingerprint": "bbbb", "config": {"k": 2}}


def test_config_diff_shows_added_removed_and_truncated_keys() -> None:
    from cts._util.confdiff import config_diff

    assert config_diff({"a": {"b": 1, "c": [1]}}, {"a": {"b": 1, "d": "x"}}) == [
        "a.c: [1] -> (absent)",
        'a.d: (absent) -> "x"',
    ]
    many = config_diff({f"k{i}": 0 for i in range(30)}, {f"k{i}": 1 for i in range(30)}, limit=5)
    assert len(many) == 6 and many[-1] == "... and 25 more key(s)"
