"""The robustness analyses add their judges' (and backbones') feedback to the runs' per-instance traces."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import mlflow

from cts import tracking
from cts.analysis import backbone_stability as bs
from cts.analysis import judge_robustness as jr
from cts.analysis.common import feedback_on_traces
from cts.core.types import QA, UNKNOWN, Instance, SearchResult
from cts.protocol.pipeline import Roles, run_instances
from cts.protocol.settings import InstanceSettings, JobSettings
from cts.report.jobs import Job
from cts.roles.lexical import LexicalJudge
from tests.helpers import Typer, gold_for

INSTANCES = [
    Instance("a", "tell me about alpha", "tell me about alpha beta"),
    Instance("b", "tell me about gamma", "tell me about gamma delta"),
]
GOLD = {"a": gold_for("a", ("alpha beta", 2), ("zeta eta", 1)), "b": gold_for("b", ("gamma delta", 1))}


class Roles1:
    """Clarifier, UA, rewriter and search of a one-question protocol; the answer names what the query asks."""

    async def ask(self, blurred_query: str, k: int) -> list[str]:
        return ["Which one?"]

    async def answer(self, fused_query: str, question: str) -> str:
        return fused_query.split()[-1] if "alpha" in fused_query else UNKNOWN

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str:
        known = [p.answer for p in qa if p.answer != UNKNOWN]
        return " ".join([blurred_query, *known])

    async def search(self, query: str) -> SearchResult:
        return SearchResult(answer=query.removeprefix("tell me about "), trace=({"tool": "search"},))


class Strict(LexicalJudge):
    """A stricter judge than the run's: only a full match counts."""

    async def judge(self, answer: str, nuggets: Sequence) -> dict[str, str]:  # noqa: ANN001
        labels = await super().judge(answer, nuggets)
        return {n: ("full" if v == "full" else "none") for n, v in labels.items()}


def _traced_job(tmp_path: Path) -> tuple[str, Job]:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    roles = Roles1()
    tracer = tracking.InstanceTraces()
    with tracking.open_mlflow_run(tracking.Experiment(uri, "cts"), "job", {}) as run_id:
        tracer.attach(run_id)
        records, _ = asyncio.run(
            run_instances(
                INSTANCES,
                GOLD,
                Roles(roles, roles, roles, roles, LexicalJudge(), Typer()),
                InstanceSettings(1),
                JobSettings(tmp_path / "job", progress=False, on_instance=tracer),
            )
        )
    mlflow.flush_trace_async_logging()
    return uri, Job("one_question", 1, tuple(records), run_id=run_id)


def _feedback(uri: str, run_id: str, name: str) -> dict[str, object]:
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name("cts")
    found = {}
    for t in mlflow.search_traces(locations=[exp.experiment_id], run_id=run_id, return_type="list"):
        for a in t.info.assessments:
            if a.name == name:
                found[t.info.tags["cts.instance_id"]] = a
    return found


def test_each_judge_of_the_robustness_analysis_scores_the_instance_on_its_trace(tmp_path: Path) -> None:
    uri, job = _traced_job(tmp_path)
    judges = {"lexical": LexicalJudge(), "strict": Strict()}
    _, labels = asyncio.run(jr.rejudge([job], GOLD, judges))
    assert feedback_on_traces(jr.judge_feedback([job], GOLD, labels)) == 2 * len(INSTANCES)
    same, strict = (
        _feedback(uri, job.run_id, "restore_score_100.lexical"),
        _feedback(uri, job.run_id, "restore_score_100.strict"),
    )
    records = {r.id: r for r in job.records}
    assert sorted(same) == sorted(strict) == ["a", "b"]
    for i, a in same.items():  # the run's own judge again: the run's score, full agreement
        assert a.value == records[i].score and a.metadata["agreement_with_run"] == "1.000"
        assert (a.source.source_type, a.source.source_id) == ("LLM_JUDGE", "lexical")
    assert strict["a"].metadata["labels"] in strict["a"].rationale


def test_each_backbone_of_the_stability_analysis_is_feedback_on_the_trace(tmp_path: Path) -> None:
    uri, job = _traced_job(tmp_path)
    items = bs.frozen_items([job], INSTANCES)

    class Unknowing(Roles1):
        async def answer(self, fused_query: str, question: str) -> str:
            return UNKNOWN

    backbones = {"same": bs.Backbone(Roles1(), Roles1()), "unknowing": bs.Backbone(Unknowing(), Unknowing())}
    replays = asyncio.run(bs.replay_all(items, backbones))
    items, outputs = bs.replayed_by_all(items, replays)
    assert feedback_on_traces(bs.backbone_feedback([job], items, outputs)) == 2 * len(INSTANCES)
    same = _feedback(uri, job.run_id, "ua_agreement.same")
    unknowing = _feedback(uri, job.run_id, "ua_agreement.unknowing")
    assert {i: a.value for i, a in same.items()} == {"a": 1.0, "b": 1.0}
    assert {i: a.value for i, a in unknowing.items()} == {"a": 0.0, "b": 1.0}  # "a" was known in the run
    assert unknowing["a"].metadata["unknown_answers"] == "1" and '"unknown"' in unknowing["a"].rationale


def test_runs_without_traces_get_nothing(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with tracking.open_mlflow_run(tracking.Experiment(uri, "cts"), "job", {}) as run_id:
        pass
    assessed = tracking.Assessed("restore_score_100.x", 1.0)
    assert feedback_on_traces([(run_id, "a", assessed), ("no-such-run", "a", assessed)]) == 0
