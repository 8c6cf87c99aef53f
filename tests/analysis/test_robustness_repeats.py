"""Judge robustness and backbone stability over jobs with repeats: per instance, as the job's metrics."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from cts.analysis import backbone_stability as bs
from cts.analysis import judge_robustness as jr
from cts.compose.services import Services
from cts.core.records import Record
from cts.core.scoring import restore_score
from cts.report.jobs import Job
from cts.roles.lexical import LexicalJudge
from tests.analysis.fakes import GOLD, INSTANCES, TOKENS, answer_with, job_records, robustness_config

TOKENS_BY_REPEAT = ({"a": 4, "b": 4, "c": 3}, {"a": 5, "b": 2, "c": 3}, {"a": 3, "b": 5, "c": 1})


def repeated_job() -> Job:
    """One job, three repeats of instances a, b, c: each repeat asked and answered differently."""
    records: list[Record] = []
    for rep, n_tokens in enumerate(TOKENS_BY_REPEAT):
        for r in job_records(1, n_tokens):
            records.append(replace(r, repeat=rep, questions=(f"Which year? (take {rep})",), answers=("1999",)))
    return Job("sys_a", 1, tuple(records[::-1]), run_id="run-a", label="sys_a")  # not in the order they ran


def lexical_score(instance_id: str, n_tokens: int) -> float:
    labels = asyncio.run(LexicalJudge().judge(answer_with(instance_id, n_tokens), GOLD[instance_id].nuggets))
    return restore_score(labels, GOLD[instance_id].nuggets)


def test_rejudged_scores_are_instance_means_and_each_instance_gets_one_feedback_per_judge() -> None:
    job = repeated_job()
    scores, labels = asyncio.run(jr.rejudge([job], GOLD, {"lexical": LexicalJudge()}, include_recorded=False))
    mine = scores[scores["condition"] == "sys_a-k1"].set_index("instance_id")["score"]
    assert sorted(mine.index) == sorted(TOKENS)  # one row per instance, not per repeat
    for i in TOKENS:
        assert mine[i] == pytest.approx(sum(lexical_score(i, t[i]) for t in TOKENS_BY_REPEAT) / 3)
    feedback = jr.judge_feedback([job], GOLD, labels)
    assert sorted(i for _, i, _ in feedback) == sorted(TOKENS)  # not 3 scores under one name on a trace


def test_backbone_items_and_feedback_count_instances_not_repeats() -> None:
    job = repeated_job()
    items = bs.frozen_items([job], INSTANCES)
    assert [(it.instance.id, it.questions) for it in items] == [(i, ("Which year? (take 0)",)) for i in sorted(TOKENS)]
    outputs = {"bb": [bs.Replay(("1999",), "rewrite")] * len(items)}
    assert sorted(i for _, i, _ in bs.backbone_feedback([job], items, outputs)) == sorted(TOKENS)


def run_analysis(experiment: str, source: Path, out: Path, services: Services) -> dict[str, pd.DataFrame]:
    from cts.compose.app import run_configured_task

    out.mkdir(parents=True)
    cfg = robustness_config(experiment, out, source, f"paths.cache_dir={services.cache_dir}", db="mlflow.db")
    run_configured_task(cfg, services)
    return {p.stem: pd.read_csv(p) for p in sorted(out.glob("*.csv"))}


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["judge_robustness", "backbone_stability"])
def test_identical_repeats_give_the_tables_of_one_run(
    experiment: str, offline_jobs: dict[int, Path], tmp_path: Path, services: Services
) -> None:
    one, three = (run_analysis(experiment, offline_jobs[n], tmp_path / f"r{n}", services) for n in (1, 3))
    assert set(one) == set(three) and one
    for name in one:
        pd.testing.assert_frame_equal(three[name], one[name], check_exact=True, obj=name)
    if experiment == "backbone_stability":
        assert set(three["backbone_protocol"]["n_items"]) == {12}  # the job's 12 instances
