"""``dataset=hard518`` and ``dataset=csv`` as composed from the command line; export to a released file's keys; score_answers' input check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cts.compose.app import build_node, build_services
from cts.core.errors import ConfigError
from cts.core.records import ArmResult, Record
from cts.data.csvfile import derived_id
from cts.data.release import load_release_dataset
from cts.gold import GoldError
from cts.release.cli import main
from cts.release.outputs import scan_outputs
from cts.tasks.score_answers import _scan
from tests.release.fixture import ANSWERS, PAIRS, jsonl, write_release

CONF = Path(__file__).resolve().parents[2] / "conf"


def _dataset(*overrides: str):  # noqa: ANN202 - a Dataset
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("config", overrides=list(overrides))
    return build_node(cfg.dataset, build_services(cfg))


def test_hard518_reads_the_release_in_place(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release")
    dataset = _dataset("dataset=hard518", f"dataset.release={release}")
    assert dataset.name == "hard518" and [i.id for i in dataset.instances] == [i for i, _, _ in PAIRS]
    assert dataset.gold["q2"].nuggets[0].weight == 3 and dataset.instances[0].blurred_query == PAIRS[0][1]


def test_csv_with_its_own_column_and_gold_names(tmp_path: Path) -> None:
    write_release(tmp_path / "release", with_id=False)
    data = tmp_path / "release" / "data"
    dataset = _dataset(
        "dataset=csv",
        f"dataset.path={data / 'hard_518_queries.csv'}",
        f"dataset.gold_path={data / 'gold_public_hard518.jsonl'}",
    )
    assert [i.id for i in dataset.instances] == [derived_id(b, f) for _, b, f in PAIRS]
    assert set(dataset.gold) == {i.id for i in dataset.instances}


def test_a_release_with_a_bad_gold_record_is_refused_naming_it(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release")
    gold = release / "data" / "gold_public_hard518.jsonl"
    lines = gold.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[1])
    record["nuggets"][0]["weight"] = 4
    lines[1] = json.dumps(record, ensure_ascii=False)
    gold.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(GoldError) as e:
        load_release_dataset(str(release))
    assert e.value.problems == [f"{gold}:2: nugget 1: weight: 4 is not an integer in 1..3"]
    with pytest.raises(FileNotFoundError, match="unzip the release"):
        load_release_dataset(str(tmp_path / "nowhere"))


def _job_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    records = [
        Record(
            id=i,
            k=1,
            questions=("您在哪个城市？",),
            answers=("unknown",),
            rewritten_query=f"{i}改写",
            clarified=ArmResult(query=f"{i}改写", answer=a, score=50.0),
            orig=ArmResult(query=i, answer="原答案"),
        )
        for i, a in ANSWERS.items()
    ]
    (path / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    summary = {"choices": {"clarifier": "mine", "dataset": "hard518"}, "k": 1, "overrides": [], "swept": []}
    (path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return path


def test_export_writes_the_keys_of_a_released_file(tmp_path: Path) -> None:
    job = _job_dir(tmp_path / "job")
    released = jsonl(tmp_path / "ebk1__cand_hard518.jsonl", [{"qid": "q1", "prediction": "答案"}])
    assert main(["export", str(job), "--out", str(tmp_path / "out"), "--like", str(released)]) == 0
    path = tmp_path / "out" / "candidates" / "minek1__cand_hard518.jsonl"
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert set(first) == {"qid", "prediction", "rewritten_query", "restore_score_100"}
    back = scan_outputs(path, "candidates")
    assert [(r.id, r.answer, r.score) for r in back.rows] == [(i, a, 50.0) for i, a in ANSWERS.items()]
    orig = scan_outputs(tmp_path / "out" / "candidates" / "orig__cand_hard518.jsonl", "candidates")
    assert [r.answer for r in orig.rows] == ["原答案"] * 4


def test_score_answers_refuses_an_answer_whose_id_is_not_in_the_gold(tmp_path: Path) -> None:
    dataset = load_release_dataset(str(write_release(tmp_path / "release")))
    path = jsonl(tmp_path / "a.jsonl", [{"id": "q1", "answer": "答案"}, {"id": "q7", "answer": "答案"}])
    with pytest.raises(ConfigError) as e:
        _scan(str(path), {}, dataset.gold)
    assert str(e.value) == f"error: {path}:2: id 'q7' is not in the dataset's gold"
