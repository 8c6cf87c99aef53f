"""Dataset loading: row validation, field mapping, UTF-8 round trip, gold coverage, configs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cts.compose.app import build_node
from cts.core.types import Evidence, Gold, Instance, Nugget
from cts.data.jsonl import (
    Dataset,
    DatasetError,
    Reading,
    dataset_metrics,
    load_jsonl_dataset,
    read_instances_jsonl,
    select_instances,
    write_instances_jsonl,
)
from cts.gold import GoldError, write_gold

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")


def _row(i: object, blurred: str = "q", fused: str | None = "q star", **extra: object) -> str:
    return json.dumps({"id": i, "blurred_query": blurred, "fused_query": fused, **extra}, ensure_ascii=False)


def _gold(instance_id: str, fused_query: str | None = None) -> Gold:
    prov = {} if fused_query is None else {"fused_query": fused_query}
    return Gold(
        instance_id=instance_id,
        nuggets=(Nugget("n1", "A fact.", 3, ("e1",)),),
        evidence=(Evidence("e1", "local://1", "T", "A fact."),),
        provenance=prov,
    )


def test_every_bad_row_is_reported_with_file_line_and_field(tmp_path: Path) -> None:
    lines = [
        _row("a"),  # 1 ok
        "{not json",  # 2 bad JSON
        json.dumps({"id": "b", "fused_query": "x"}),  # 3 missing blurred_query
        _row("c", blurred="   "),  # 4 blank string
        _row("a"),  # 5 duplicate id
        "[1, 2]",  # 6 not an object
        "",  # 7 blank line: not a row
        _row(True),  # 8 bool id
        _row("d", fused=None),  # 9 null field
        _row("e", meta=[1]),  # 10 meta not an object
        _row(7),  # 11 ok (int id)
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError) as err:
        read_instances_jsonl(path)
    problems = err.value.problems
    assert problems == [
        f"{path}:2: <row>: invalid JSON (Expecting property name enclosed in double quotes at column 2)",
        f"{path}:3: blurred_query: missing",
        f"{path}:4: blurred_query: empty string",
        f"{path}:5: id: duplicate id 'a' (first at line 1)",
        f"{path}:6: <row>: must be a JSON object, got list",
        f"{path}:8: id: must be a string or an integer, got bool",
        f"{path}:9: fused_query: missing",
        f"{path}:10: meta: must be an object, got list",
    ]
    assert str(err.value).count("\n") == len(problems) - 1


def test_invalid_utf8_is_a_row_error(tmp_path: Path) -> None:
    path = tmp_path / "enc.jsonl"
    path.write_bytes(_row("a").encode() + b"\n" + b'{"id": "\xff"}\n')
    with pytest.raises(DatasetError, match=r"enc\.jsonl:2: <row>: invalid UTF-8"):
        read_instances_jsonl(path)


def test_field_mapping_int_ids_and_meta(tmp_path: Path) -> None:
    path = tmp_path / "mapped.jsonl"
    row = {
        "qid": 12,
        "bq": "天气",
        "oq": "2024年北京的天气",
        "ambiguity": "time",
        "meta": {"language": "zh"},
    }
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    fields = {"id": "qid", "blurred_query": "bq", "fused_query": "oq"}
    [inst] = read_instances_jsonl(path, fields)
    assert inst == Instance("12", "天气", "2024年北京的天气", {"ambiguity": "time", "language": "zh"})


def test_mapped_field_names_appear_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"qid": 1, "bq": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"m\.jsonl:1: oq: missing"):
        read_instances_jsonl(path, {"id": "qid", "blurred_query": "bq", "fused_query": "oq"})


def test_unknown_paper_field_in_mapping_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(_row("a") + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="unknown paper field"):
        read_instances_jsonl(path, {"query": "q"})


def test_chinese_round_trip_is_exact_and_readable(tmp_path: Path) -> None:
    instances = [
        Instance("1", "苹果多少钱", "2024年北京的苹果多少钱？", {"ambiguity": ["time", "region"]}),
        Instance("2", "best phone", "best phone under $300 in 2023", {}),
    ]
    path = tmp_path / "sub" / "zh.jsonl"
    write_instances_jsonl(instances, path)
    assert "2024年北京的苹果" in path.read_text(encoding="utf-8")  # not \u escapes
    assert read_instances_jsonl(path) == instances
    assert [p.name for p in path.parent.iterdir()] == ["zh.jsonl"]  # no temp file left


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + _row("a", "问", "问题").encode() + b"\n")
    assert read_instances_jsonl(path)[0].id == "a"


def test_blurred_equal_fused_is_a_warning_not_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "same.jsonl"
    path.write_text(_row("a", "Same  Query", "same query") + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="cts.data.jsonl"):
        assert len(read_instances_jsonl(path)) == 1
    assert "same.jsonl:1: blurred_query equals fused_query" in caplog.text


def _write_set(tmp_path: Path, ids: list[str], gold_ids: list[str]) -> tuple[Path, Path]:
    data = tmp_path / "set.jsonl"
    data.write_text("".join(_row(i) + "\n" for i in ids), encoding="utf-8")
    gold = tmp_path / "gold.jsonl"
    write_gold([_gold(i) for i in gold_ids], gold)
    return data, gold


def test_load_dataset_with_gold(tmp_path: Path) -> None:
    data, gold = _write_set(tmp_path, ["a", "b"], ["b", "a", "zz"])
    ds = load_jsonl_dataset(str(data), str(gold))
    assert isinstance(ds, Dataset) and ds.name == "set"
    assert [i.id for i in ds.instances] == ["a", "b"]
    assert set(ds.gold) == {"a", "b"}
    with pytest.raises(TypeError):
        ds.gold["c"] = _gold("c")  # type: ignore[index]


def test_load_dataset_refuses_missing_gold(tmp_path: Path) -> None:
    data, gold = _write_set(tmp_path, ["a", "b", "c"], ["b"])
    with pytest.raises(DatasetError, match=r"gold\.jsonl: no gold for 2 of 3 instance\(s\): a, c"):
        load_jsonl_dataset(str(data), str(gold))


def test_load_dataset_refuses_gold_of_another_fused_query(tmp_path: Path) -> None:
    data, _ = _write_set(tmp_path, ["a"], ["a"])
    gold = tmp_path / "stale.jsonl"
    write_gold([_gold("a", fused_query="an older intent")], gold)
    with pytest.raises(DatasetError, match=r"different fused_query for 1 instance\(s\): a"):
        load_jsonl_dataset(str(data), str(gold))


def test_load_dataset_refuses_invalid_gold_and_names_the_file(tmp_path: Path) -> None:
    data, _ = _write_set(tmp_path, ["a"], ["a"])
    gold = tmp_path / "broken_gold.jsonl"
    gold.write_text('{"instance_id": "a", "nuggets": []}\n', encoding="utf-8")
    with pytest.raises(GoldError, match=r"broken_gold\.jsonl:1: no nuggets"):
        load_jsonl_dataset(str(data), str(gold))


def test_missing_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_jsonl_dataset(str(tmp_path / "nope.jsonl"), str(tmp_path / "g.jsonl"))
    data, _ = _write_set(tmp_path, ["a"], ["a"])
    with pytest.raises(FileNotFoundError, match="gold file not found.*g.jsonl"):
        load_jsonl_dataset(str(data), str(tmp_path / "g.jsonl"))


@pytest.mark.parametrize("option", ["jsonl", "cts518"])
def test_dataset_configs_instantiate(option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, gold = _write_set(tmp_path, ["a"], ["a"])
    monkeypatch.setenv("CTS518_PATH", str(data))
    monkeypatch.setenv("CTS518_GOLD", str(gold))
    overrides = [f"dataset.path={data}", f"dataset.gold_path={gold}"] if option == "jsonl" else []
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(f"dataset/{option}", overrides=overrides)
    ds = build_node(cfg.dataset, None)
    assert ds.name == ("set" if option == "jsonl" else "cts518")
    assert list(ds.gold) == ["a"]


def test_an_empty_or_blank_file_is_refused(tmp_path: Path) -> None:
    for text in ("", "\n  \n"):
        path = tmp_path / "empty.jsonl"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(DatasetError, match=r"empty\.jsonl: no instances"):
            read_instances_jsonl(path)


def test_over_long_fields_are_file_line_errors_with_a_configurable_limit(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    rows = [
        {"id": "a", "blurred_query": "短" * 4001, "fused_query": "ok"},
        {"id": "b", "blurred_query": "ok", "fused_query": "x" * 50},
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DatasetError) as err:
        read_instances_jsonl(path)
    assert err.value.problems == [f"{path}:1: blurred_query: 4,001 characters, longer than max_field_chars=4000"]
    with pytest.raises(DatasetError) as err:
        read_instances_jsonl(path, max_field_chars=10)
    assert [p.split(": ")[1] for p in err.value.problems] == ["blurred_query", "fused_query"]
    assert len(read_instances_jsonl(path, max_field_chars=5000)) == 2


def test_only_with_gold_leaves_out_and_counts_instances_without_gold(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data, gold = _write_set(tmp_path, ["a", "b", "c"], ["b"])
    (tmp_path / "failures.jsonl").write_text('{"id": "a", "reason": "search failed"}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"no gold for 2 of 3 .*why: see .*failures\.jsonl.*only_with_gold=true"):
        load_jsonl_dataset(str(data), str(gold))
    with caplog.at_level("WARNING", logger="cts.data.jsonl"):
        ds = load_jsonl_dataset(str(data), str(gold), settings=Reading(only_with_gold=True))
    assert [i.id for i in ds.instances] == ["b"] and ds.without_gold == ("a", "c")
    assert dataset_metrics(ds) == {"n_without_gold": 2.0}
    assert "2 of 3 instance(s) have no gold and are left out" in caplog.text
    data, gold = _write_set(tmp_path, ["a"], ["b"])
    with pytest.raises(DatasetError, match="none of the 1 instance"):
        load_jsonl_dataset(str(data), str(gold), settings=Reading(only_with_gold=True))


def test_a_job_over_no_instances_is_refused() -> None:
    empty = Dataset(name="none", instances=(), gold={})
    with pytest.raises(DatasetError, match="dataset 'none': no instances"):
        select_instances(empty, None)
    one = Dataset(name="one", instances=(Instance("a", "q", "q x"),), gold={})
    assert [i.id for i in select_instances(one, 5)] == ["a"]
