"""``python -m cts.release inspect`` and ``import``: the layout report, and Tables 4/5/7 from the released outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cts import tracking
from cts.release.cli import main
from cts.release.describe import inspect_release
from cts.release.importer import ImportRefused, import_release
from cts.report.build import ReportSettings, build_sweep_report
from cts.stats import Resampling
from tests.release.fixture import CLARIFY, KNOWN, gold_record, jsonl, write_release


@pytest.fixture
def release(tmp_path: Path) -> Path:
    return write_release(tmp_path / "release")


def test_inspect_shows_every_file_and_the_mapping(release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(release)]) == 0
    out = capsys.readouterr().out
    assert "hard_518_queries.csv: CSV, 4 rows (4 good), columns ['id', 'blurred_query', 'fused_query']" in out
    assert "gold_public_hard518.jsonl: JSONL, 4 records (4 good), 8 nuggets, weights [1, 2, 3]" in out
    assert "nuggets=nuggets" in out and "weight=weight" in out and "gold for 4 of 4 instances" in out
    assert "ebk1__cand_hard518.jsonl: system eb, k=1, 4 records (4 good)" in out
    assert "推荐一款适合新手的相机" in out and out.rstrip().endswith("no problem: cts reads every file as shown")


def test_inspect_of_a_mismatched_gold_file_is_one_error_line(release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gold = release / "data" / "gold_public_hard518.jsonl"
    jsonl(gold, [{"qid": "q1", "要点": [{"内容": "x", "权重": 1}]}])
    assert main(["inspect", str(release)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {gold}:1: the gold fits no name of 'nuggets' (tried nuggets, gold_nuggets, golden_nuggets, "
        "nugget_list); it has ['qid', '要点']: set dataset.gold_fields.nuggets=<one of them>"
    ]
    assert main(["inspect", str(release), "--gold-field", "nuggets=要点"]) == 1  # the next key to set, in one line
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "fits no name of 'text'" in line and "its nuggets have ['内容', '权重']" in line


def test_inspect_names_a_candidate_whose_id_is_not_in_the_gold(release: Path) -> None:
    jsonl(release / "data" / "gold_public_hard518.jsonl", [gold_record(i) for i in ("q1", "q2", "q3")])
    _, problems = inspect_release(release)
    cand = release / "results" / "candidates"
    assert f"{cand / 'ebk1__cand_hard518.jsonl'}:4: id 'q4' is not in the gold" in problems


def test_import_computes_tables_4_5_7_without_a_model(release: Path, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    jobs = import_release(release, tmp_path / "imported", uri)
    assert [(j.system, j.k, j.n_records) for j in jobs] == [("eb", 1, 4), ("gp", 2, 4)]
    for job in jobs:
        summary = json.loads((job.job_dir / "summary.json").read_text())
        assert summary["run_id"] == job.run_id and summary["k"] == job.k
        records = [json.loads(line) for line in (job.job_dir / "records.jsonl").read_text().splitlines()]
        assert [len(r["questions"]) for r in records] == [job.k] * 4 and records[0]["orig"]["answer"]
    runs = tracking.search_runs(uri)
    assert set(runs["tags.cts.source"]) == {"release"} and set(runs["status"]) == {"FINISHED"} and len(runs) == 2
    report = build_sweep_report(tmp_path / "imported", settings=ReportSettings(Resampling(200)))
    assert report.ok, report.errors
    for table, column, metric in (
        ("ua_diagnostics", "ua_unknown_rate", "ua_unknown_rate"),
        ("region_only", "region_only_count", "region_only_count"),
        ("all_unknown", "all_unknown_rate", "all_unknown_rate"),
    ):
        data = report.tables[table].set_index("system")
        for (system, _k), known in KNOWN.items():
            assert data.loc[system, column] == pytest.approx(known[metric]), (table, system)
    known_cnt = report.tables["all_unknown"].set_index("system")
    assert known_cnt.loc["eb", "known_cnt_1"] == pytest.approx(KNOWN["eb", 1]["known_cnt_1"])
    assert known_cnt.loc["gp", "known_cnt_2"] == pytest.approx(KNOWN["gp", 2]["known_cnt_2"])
    assert {(system, k) for system, k in CLARIFY} == {(j.system, j.k) for j in jobs}


def test_a_bad_output_file_refuses_the_import_before_anything_is_written(release: Path, tmp_path: Path) -> None:
    bad = release / "results" / "clarify_only" / "gpk2__clarify_hard518.jsonl"
    bad.write_text(bad.read_text(encoding="utf-8") + '{"id": "q1", "questions": ["再问一次"]}\n', encoding="utf-8")
    (release / "results" / "candidates" / "final.jsonl").write_text('{"id": "q1", "answer": "x"}\n')
    with pytest.raises(ImportRefused) as e:
        import_release(release, tmp_path / "imported", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert len(e.value.problems) == 1 and "final.jsonl: the name says no system and k" in e.value.problems[0]
    (release / "results" / "candidates" / "final.jsonl").unlink()
    with pytest.raises(ImportRefused) as e:
        import_release(release, tmp_path / "imported", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert e.value.problems == [f"{bad}:5: duplicate id 'q1' (first at line 1)"]
    assert not (tmp_path / "imported").exists()
