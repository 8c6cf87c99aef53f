"""``python -m cts.realism``: each UA, gate or clarifier one MLflow run with its tables; a report; an LLM UA over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cts import tracking
from cts.realism.cli import expand, label_of, main
from tests.llm_server import ScriptedServer
from tests.realism.files import write_clariq, write_qulac


def _common(tmp_path: Path, cache_dir: Path) -> list[str]:
    return [
        f"paths.cache_dir={cache_dir}",
        "bootstrap.n_resamples=200",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]


def test_expand_and_labels():
    combos = expand(["dataset=clariq", "ua=rules", "ua/persona=cooperative,terse", "dataset.path=x.tsv"])
    assert combos == [
        ["dataset=clariq", "ua=rules", "ua/persona=cooperative", "dataset.path=x.tsv"],
        ["dataset=clariq", "ua=rules", "ua/persona=terse", "dataset.path=x.tsv"],
    ]
    assert (
        label_of(combos[1] + ["services.llm.api_base=http://h", "local_llm=smollm2_135m"])
        == "ua=rules ua/persona=terse"
    )


def test_audit_of_rule_personas_logs_one_run_each(tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]):
    data, out = write_clariq(tmp_path / "train.tsv"), tmp_path / "out"
    args = ["clariq", f"dataset.path={data}", "ua=rules", "ua/persona=cooperative,off_target", "--out", str(out)]
    assert main([*args, *_common(tmp_path, cache_dir)]) == 0
    page = capsys.readouterr().out
    assert "| ua=rules ua/persona=cooperative" in page and "Answerability" in page and "clariq-train" in page
    assert (out / "report.md").is_file()
    runs = tracking.search_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "cts-realism")
    assert len(runs) == 2 and set(runs["tags.cts.kind"]) == {"realism"}
    assert set(runs["params.dataset"]) == {"clariq-train"} and (runs["metrics.pairs"] == 7).all()
    assert runs["metrics.human_answer_rate"].iloc[0] == pytest.approx(4 / 7)
    from mlflow import MlflowClient

    names = {a.path for a in MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").list_artifacts(runs["run_id"].iloc[0])}
    assert {"realism.csv", "confusion.csv", "metrics.json", "report.md"} <= names
    assert "pairs.jsonl" not in names  # the dataset's text stays on the user's disk


def test_llm_ua_over_http_on_qulac(tmp_path: Path, cache_dir: Path, llm_server: ScriptedServer, capsys):
    data, out = write_qulac(tmp_path / "qulac.json"), tmp_path / "out"
    llm_server.handler = lambda body: "北京" if "地区" in body["messages"][-1]["content"] else "yes"
    args = ["qulac", f"dataset.path={data}", "ua=gpt", f"services.llm.api_base={llm_server.base_url}"]
    args += ["services.llm.api_key=x", "services.llm.cache.mode=off", "--out", str(out), "--no-log"]
    assert main([*args, *_common(tmp_path, cache_dir)]) == 0
    assert len(llm_server.requests) == 4  # one call per answered pair
    sent = sorted(r.body["messages"][-1]["content"] for r in llm_server.requests)
    assert sum("长城在北京的旅游路线" in s and "您问的是哪个地区？" in s for s in sent) == 1  # q* and the question
    assert sum('Find "glass frog" pictures.' in s for s in sent) == 2
    pairs = [json.loads(line) for line in next(out.glob("*/pairs.jsonl")).read_text(encoding="utf-8").splitlines()]
    assert [p["ua"] for p in pairs] == ["yes", "yes", "yes", "北京"]
    metrics = json.loads(next(out.glob("*/metrics.json")).read_text())
    assert metrics["ua_answer_rate"] == 1.0 and metrics["over_answer"] == pytest.approx(1 / 4)  # the bare "no"
    assert metrics["content_f1"] == pytest.approx((1.0 + 0.0 + 1.0) / 3)  # yes/yes, photos/yes, 北京/北京

    replay = ["--replay", str(next(out.glob("*/pairs.jsonl"))), "--out", str(tmp_path / "again")]
    assert main([*args[:-3], "--no-log", *replay, *_common(tmp_path, cache_dir)]) == 0
    assert len(llm_server.requests) == 4  # rescored without a call
    again = json.loads(next((tmp_path / "again").glob("*/metrics.json")).read_text())
    assert again["over_answer"] == metrics["over_answer"] and again["replayed"] == 4

    kept = next(out.glob("*/pairs.jsonl")).read_text(encoding="utf-8").splitlines()[:3]  # as if one call had failed
    (tmp_path / "three.jsonl").write_text("\n".join(kept) + "\n", encoding="utf-8")
    resume = ["--replay", str(tmp_path / "three.jsonl"), "--out", str(tmp_path / "resumed")]
    assert main([*args[:-3], "--no-log", *resume, *_common(tmp_path, cache_dir)]) == 0
    assert len(llm_server.requests) == 5  # only the missing pair was asked
    resumed = json.loads(next((tmp_path / "resumed").glob("*/metrics.json")).read_text())
    assert resumed["replayed"] == 3 and resumed["pairs"] == 4 and resumed["content_f1"] == metrics["content_f1"]


def test_ask_or_not_and_pattern_commands(tmp_path: Path, cache_dir: Path, capsys):
    data = write_clariq(tmp_path / "train.tsv")
    common = [*_common(tmp_path, cache_dir), "--no-log"]
    assert (
        main(
            [
                "clariq",
                f"dataset.path={data}",
                "--ask-or-not",
                "gate=never,oracle",
                "--out",
                str(tmp_path / "g"),
                *common,
            ]
        )
        == 0
    )
    page = capsys.readouterr().out
    assert "| gate=oracle | 4 | 3 | 1.000" in page and "| gate=never | 4 | 3 | 0.500" in page
    assert (
        main(
            [
                "clariq",
                f"dataset.path={data}",
                "--pattern",
                "clarifier=rules_region",
                "ua=rules",
                "--out",
                str(tmp_path / "p"),
                *common,
            ]
        )
        == 0
    )
    page = capsys.readouterr().out
    assert (
        "clarifier=rules_region ua=rules" in page
        and "people (clariq-train's own questions)" in page
        and "paper" in page
    )


def test_bad_input_is_one_error_line(tmp_path: Path, capsys):
    assert main(["clariq", "ua=rules", "--no-log"]) == 1
    assert (
        capsys.readouterr().err.strip()
        == "error: dataset.path: missing mandatory value; set it on the command line: dataset.path=..."
    )
    assert main(["qulac", f"dataset.path={tmp_path / 'x.json'}", "ua=rules", "--no-log", "--out", str(tmp_path)]) == 1
    assert "error: dataset.path: no such file" in capsys.readouterr().err


def test_python_m_cts_gating_scores_a_gate_against_people(tmp_path: Path, cache_dir: Path, capsys):
    from cts.gating.cli import main as gating

    data = write_clariq(tmp_path / "train.tsv")
    args = ["clariq", f"dataset.path={data}", "gate=never", "--out", str(tmp_path / "g"), "--no-log"]
    assert gating([*args, *_common(tmp_path, cache_dir)]) == 0
    assert "| gate=never | 4 | 3 | 0.500" in capsys.readouterr().out
