"""A task is two files: its module (which registers it) and ``conf/task/<name>.yaml``; no cts file is edited.

The task and its dataset loader are defined here; their configs are written into a tmp config dir
that Hydra adds to its search path. Both run through the code path of ``run.py`` (in-process) and
through ``python run.py`` itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cts.tasks.registry import TaskContext, task, task_spec
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
READS: list[str] = []  # the paths read_lines read, in this process


@dataclass(frozen=True)
class Lines:
    """A dataset of text lines (the component ``conf/dataset/lines.yaml`` configures)."""

    name: str
    lines: tuple[str, ...]


def read_lines(path: str) -> Lines:
    """Load a text file as :class:`Lines` (a dataset component: built from config by cts)."""
    READS.append(path)
    return Lines(Path(path).stem, tuple(Path(path).read_text(encoding="utf-8").splitlines()))


def compose_count(ctx: TaskContext) -> float:
    """The composer: the task's typed arguments from the job's context."""
    return count_task(lines=ctx.input(), word=ctx.value("task.word"), out_dir=Path(ctx.value("paths.output_dir")))


@task(compose_count)
def count_task(*, lines: Lines, word: str, out_dir: Path) -> float:
    """Count the lines holding ``word``; write ``count.json`` into the job dir."""
    n = sum(word in line for line in lines.lines)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "count.json").write_text(json.dumps({"dataset": lines.name, "word": word, "n": n}))
    return float(n)


def write_configs(tmp: Path) -> tuple[Path, Path]:
    """The task's and the dataset's config files in a fresh config dir, and a dataset file."""
    conf = tmp / "conf"
    (conf / "task").mkdir(parents=True)
    (conf / "dataset").mkdir()
    (conf / "task" / "count.yaml").write_text(f"_target_: {__name__}.count_task\nword: apple\n")
    (conf / "dataset" / "lines.yaml").write_text(f"_target_: {__name__}.read_lines\npath: ???\n")
    data = tmp / "fruit.txt"
    data.write_text("apple pie\nbanana\ncrab apple\n", encoding="utf-8")
    return conf, data


def test_the_decorator_registers_the_task_on_its_function() -> None:
    spec = task_spec(f"{__name__}.count_task")
    assert spec.compose is compose_count and spec.calls == ()
    with pytest.raises(ValueError, match="is not a cts task"):
        task_spec(f"{__name__}.read_lines")  # a function, but not a registered task
    with pytest.raises(ValueError, match="cannot be imported"):
        task_spec(f"{__name__}.no_such_task")


def test_a_task_from_outside_cts_runs_like_run_py_and_its_input_is_read_once(tmp_path: Path) -> None:
    from cts._util.launch import Launch
    from cts.compose.app import check_start, run

    conf, data = write_configs(tmp_path)
    out = tmp_path / "job"
    overrides = [
        f"hydra.searchpath=[file://{conf}]",
        "task=count",
        "dataset=lines",
        f"dataset.path={data}",
        f"paths.output_dir={out}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    READS.clear()
    with Launch.begin(str(out)).bound() as launch:  # what the Hydra callback does first: a launch, then its checks
        check_start(cfg, [cfg], launch.preflight)  # the input is read here, before any job
        assert READS == [str(data)]
        assert run(cfg) == 2.0
    assert READS == [str(data)]  # the job reused what the launch's pre-start read found
    assert json.loads((out / "count.json").read_text()) == {"dataset": "fruit", "word": "apple", "n": 2}


@pytest.mark.slow
def test_python_run_py_runs_a_task_added_by_a_config_dir(tmp_path: Path) -> None:
    conf, data = write_configs(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = run_script(
        [
            str(REPO / "run.py"),
            "--config-dir",
            str(conf),
            "task=count",
            "task.word=banana",
            "dataset=lines",
            f"dataset.path={data}",
            f"hydra.run.dir={tmp_path / 'run'}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        ],
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "count.json").read_text()) == {"dataset": "fruit", "word": "banana", "n": 1}
