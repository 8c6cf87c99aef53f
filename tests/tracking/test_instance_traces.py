"""Per-instance MLflow traces, their assessments and the records table, read back from a real (SQLite) store."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence

import mlflow
import pytest

from cts import tracking
from cts.core.types import QA, Instance, SearchResult
from cts.protocol.pipeline import Roles, run_instances
from cts.protocol.settings import InstanceSettings, JobSettings
from cts.roles.lexical import LexicalJudge
from cts.roles.rules import RuleClarifier, RuleRewriter, RuleUserAnswerer
from tests.helpers import TableSearch, Typer, built, gold_for, mercury


def _traces(uri: str, experiment: str, run_id: str) -> list:
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment)
    mlflow.flush_trace_async_logging()
    return mlflow.search_traces(locations=[exp.experiment_id], run_id=run_id, return_type="list")


def test_one_trace_per_instance_with_spans_labels_and_assessments(services, tmp_path):
    inst, gold, table = mercury()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.prepare_store(uri)
    roles = Roles(
        clarifier=RuleClarifier(order=["scope", "time"], mode="sequential"),
        ua=built(RuleUserAnswerer, services),
        rewriter=RuleRewriter(),
        search=TableSearch(table),
        judge=LexicalJudge(),
        qtyper=Typer(),
    )
    tracer = tracking.InstanceTraces({"cts.system": "rules", "cts.sweep_dir": ""})
    with tracking.open_mlflow_run(tracking.Experiment(uri, "traces"), "job", {}) as run_id:
        tracer.attach(run_id)
        records, _ = asyncio.run(
            run_instances(
                [inst],
                {"m1": gold},
                roles,
                InstanceSettings(2),
                JobSettings(tmp_path / "job", progress=False, models={"judge": "LexicalJudge"}, on_instance=tracer),
            )
        )
        tracking.log_records_table(records, ["m1"], tracer.trace_ids)
    (trace,) = _traces(uri, "traces", run_id)
    record = records[0]
    assert tracer.trace_ids == {"m1": trace.info.trace_id}
    tags = trace.info.tags
    assert (tags["cts.instance_id"], tags["cts.k"], tags["cts.mode"]) == ("m1", "2", "sequential")
    assert tags["cts.model.judge"] == "LexicalJudge" and tags["cts.system"] == "rules"
    assert "cts.sweep_dir" not in tags  # empty tags are not written
    names = [s.name for s in trace.data.spans]
    assert names[0] == "instance m1" and {"clarify turn 1", "clarify turn 2", "ua answer 1", "ua answer 2"} <= set(
        names
    )
    assert {"rewrite", "qtype", "clarified arm", "orig arm", "search turn 1", "tool: search", "judge"} <= set(names)
    clarified = next(s for s in trace.data.spans if s.name == "clarified arm")
    labels = [s.outputs["labels"] for s in trace.data.spans if s.name == "judge" and s.parent_id == clarified.span_id]
    assert {n: v["label"] for n, v in labels[0].items()} == dict(record.clarified.labels)
    assert labels[0]["n1"]["text"] == gold.nuggets[0].text
    assert trace.data.spans[0].inputs == {"instance_id": "m1", "blurred_query": inst.blurred_query}  # pairs runs
    for span in trace.data.spans:  # the hidden intent only reaches the UA spans' inputs
        ours = {k: v for k, v in span.attributes.items() if not k.startswith("mlflow.")}  # mlflow.* mirror inputs
        parts = {"inputs": span.inputs, "outputs": span.outputs, "attributes": ours}
        leaks = [p for p, v in parts.items() if inst.fused_query in json.dumps(v, ensure_ascii=False)]
        assert leaks == (["inputs"] if span.name.startswith("ua answer") else []), (span.name, leaks)
    _check_assessments(trace, record, gold)
    mlflow.set_experiment("traces")
    table = mlflow.load_table("records_table.json", run_ids=[run_id])
    assert table[["instance_id", "run_id", "trace_id"]].values.tolist() == [["m1", run_id, trace.info.trace_id]]
    assert json.loads(table["clarified_labels"][0]) == dict(record.clarified.labels)
    assert table["score"].tolist() == [record.score] and table["n_unknown"].tolist() == [
        record.answers.count("unknown")
    ]


def _check_assessments(trace, record, gold) -> None:
    found = {a.name: a for a in trace.info.assessments}
    assert set(found) == {
        "restore_score_100",
        "orig_restore_score_100",
        "delta_vs_orig",
        "nugget_labels",
        "unknown_answers",
        "gold_nuggets",
    }
    assert (
        found["restore_score_100"].value == record.score and found["orig_restore_score_100"].value == record.orig_score
    )
    assert found["delta_vs_orig"].value == pytest.approx(record.score - record.orig_score)
    labels = " ".join(f"{n}={v}" for n, v in record.clarified.labels.items())
    assert found["nugget_labels"].value == labels
    assert (found["nugget_labels"].source.source_type, found["nugget_labels"].source.source_id) == (
        "LLM_JUDGE",
        "LexicalJudge",
    )
    assert gold.nuggets[0].text in found["nugget_labels"].rationale
    assert found["unknown_answers"].value == record.answers.count("unknown")
    assert found["gold_nuggets"].value == [{"id": n.id, "text": n.text, "weight": n.weight} for n in gold.nuggets]


def test_an_unscored_arm_is_feedback_with_its_error(services, tmp_path):
    inst, gold, table = mercury()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    roles = Roles(
        clarifier=RuleClarifier(order=["scope"]),
        ua=built(RuleUserAnswerer, services),
        rewriter=RuleRewriter(),
        search=TableSearch(table, fail_on=["Tell me about Mercury, planet"]),
        judge=LexicalJudge(),
        qtyper=Typer(),
    )
    tracer = tracking.InstanceTraces()
    with tracking.open_mlflow_run(tracking.Experiment(uri, "traces"), "job", {}) as run_id:
        tracer.attach(run_id)
        records, _ = asyncio.run(
            run_instances(
                [inst],
                {"m1": gold},
                roles,
                InstanceSettings(1),
                JobSettings(tmp_path / "job", progress=False, on_instance=tracer),
            )
        )
    assert records[0].score is None
    (trace,) = _traces(uri, "traces", run_id)
    found = {a.name: a for a in trace.info.assessments}
    assert found["restore_score_100"].value is None and found["restore_score_100"].error.error_code == "exception"
    assert "delta_vs_orig" not in found and found["orig_restore_score_100"].value == records[0].orig_score
    assert trace.info.state.value == "ERROR"


def test_instances_that_finish_before_the_run_exists_are_traced_into_it(tmp_path):
    """In a sweep, instances start (and commit, on the loop's thread) before the job's run is set up."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    insts = [Instance(f"i{n}", f"q{n}", f"q{n}, intent") for n in range(4)]
    golds = {i.id: gold_for(i.id, ("fact", 1)) for i in insts}
    results = [_fake_record(i) for i in insts]
    tracer = tracking.InstanceTraces()
    early = threading.Thread(target=lambda: [tracer(i, golds[i.id], r, []) for i, r in zip(insts[:3], results)])
    early.start()
    early.join()
    with tracking.open_mlflow_run(tracking.Experiment(uri, "traces"), "job", {}) as run_id:
        tracer.attach(run_id)  # the three that waited are logged now
        late = threading.Thread(target=tracer, args=(insts[3], golds["i3"], results[3], []))
        late.start()
        late.join()
    found = _traces(uri, "traces", run_id)
    assert sorted(t.info.tags["cts.instance_id"] for t in found) == ["i0", "i1", "i2", "i3"]
    assert {t.info.trace_id for t in found} == set(tracer.trace_ids.values())


def _fake_record(inst: Instance):  # noqa: ANN202 - a Record
    from cts.core.records import ArmResult, Record

    arm = ArmResult(query=inst.blurred_query, answer="fact", labels={"n1": "full"}, score=100.0)
    return Record(
        id=inst.id,
        k=1,
        questions=("which?",),
        answers=("unknown",),
        rewritten_query=inst.blurred_query,
        clarified=arm,
        orig=arm,
        elapsed_s=0.01,
    )


def test_tracer_is_an_option(tmp_path):
    from cts.tasks.evaluate import instance_tracer
    from cts.tasks.job import JobContext, RunInfo, Tracking

    def run(traces: bool) -> RunInfo:
        return RunInfo(JobContext({}, "k1", tmp_path, ""), Tracking("sqlite://", "x", instance_traces=traces), {}, {})

    assert instance_tracer(run(False)) is None
    assert isinstance(instance_tracer(run(True)), tracking.InstanceTraces)
    assert Tracking("sqlite://", "x").instance_traces  # on by default


# ----------------------------------------------------------------------------- real span times


class Slow:
    """Every role at once, each taking a known time (asyncio.sleep), so a stage's span has a known length."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.s = seconds

    async def ask(self, blurred_query: str, k: int) -> list[str]:
        await asyncio.sleep(self.s["clarify"])
        return [f"Which {blurred_query} ({i})?" for i in range(k)]

    async def answer(self, fused_query: str, question: str) -> str:
        await asyncio.sleep(self.s["answer"])
        return "the planet"

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str:
        await asyncio.sleep(self.s["rewrite"])
        return f"{blurred_query}, the planet"

    async def search(self, query: str) -> SearchResult:
        await asyncio.sleep(self.s["search"])
        return SearchResult(answer="Mercury is the first planet from the Sun", trace=({"tool": "search", "q": query},))

    async def judge(self, answer: str, nuggets: Sequence) -> dict[str, str]:  # noqa: ANN001
        await asyncio.sleep(self.s["judge"])
        return {n.id: "full" for n in nuggets}


def _interval_union(spans: list) -> int:
    covered, end = 0, 0
    for s in sorted(spans, key=lambda s: s.start_time_ns):
        start = max(s.start_time_ns, end)
        if s.end_time_ns > start:
            covered += s.end_time_ns - start
            end = s.end_time_ns
    return covered


@pytest.mark.serial  # asserts wall-time relations
def test_stage_spans_take_their_stage_times_and_add_up_to_the_instance_wall_time(tmp_path):
    inst, gold, _ = mercury()
    seconds = {"clarify": 0.06, "answer": 0.04, "rewrite": 0.03, "search": 0.05, "judge": 0.02}
    slow = Slow(seconds)
    roles = Roles(clarifier=slow, ua=slow, rewriter=slow, search=slow, judge=slow, qtyper=Typer())
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracer = tracking.InstanceTraces()
    with tracking.open_mlflow_run(tracking.Experiment(uri, "traces"), "job", {}) as run_id:
        tracer.attach(run_id)
        records, _ = asyncio.run(
            run_instances(
                [inst],
                {"m1": gold},
                roles,
                InstanceSettings(2),
                JobSettings(tmp_path / "job", progress=False, on_instance=tracer, concurrency=1),
            )
        )
    (trace,) = _traces(uri, "traces", run_id)
    spans = {s.name: s for s in trace.data.spans}
    root = trace.data.spans[0]
    wall_ns = records[0].elapsed_s * 1e9
    assert abs((root.end_time_ns - root.start_time_ns) - wall_ns) < 1e6  # the root is the instance's measured time

    def took(name: str) -> float:
        return (spans[name].end_time_ns - spans[name].start_time_ns) / 1e9

    for name, stage in (
        ("clarify", "clarify"),
        ("ua answer 1", "answer"),
        ("ua answer 2", "answer"),
        ("rewrite", "rewrite"),
        ("judge", "judge"),
    ):
        assert seconds[stage] <= took(name) < seconds[stage] + 0.03, name  # the stage's time, not the logging's
    children = [s for s in trace.data.spans if s.parent_id == root.span_id]
    # clarify -> the UA answers (together) -> rewrite -> clarified arm -> qtype run one after another, while the
    # orig arm runs beside them: together they cover the instance's wall time but for the awaits between stages.
    assert abs(_interval_union(children) - wall_ns) < 0.01 * 1e9
    chain = (
        took("clarify")
        + max(took("ua answer 1"), took("ua answer 2"))
        + took("rewrite")
        + took("clarified arm")
        + took("qtype")
    )
    assert chain == pytest.approx(wall_ns / 1e9, abs=0.01)
    orig, clarified = spans["orig arm"], spans["clarified arm"]
    assert orig.start_time_ns < spans["clarify"].end_time_ns  # the orig arm ran beside the interaction
    assert clarified.start_time_ns >= spans["rewrite"].end_time_ns


def test_attaching_to_a_run_that_is_not_the_active_one_reads_its_experiment_from_the_store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.prepare_store(uri)
    client = mlflow.MlflowClient(uri)
    experiment = client.create_experiment("elsewhere", artifact_location=(tmp_path / "a").as_uri())
    run_id = client.create_run(experiment).info.run_id
    with tracking.open_mlflow_run(tracking.Experiment(uri, "traces"), "job", {}) as active:
        tracer = tracking.InstanceTraces()
        tracer.attach(active)
        assert tracer._run[0] == active and tracer._run[1] != experiment  # the active run's, no query
        tracer.attach(run_id, uri)
        assert tracer._run == (run_id, experiment)
