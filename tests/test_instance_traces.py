"""Per-instance MLflow traces and the records table, read back from a real (SQLite) store."""

from __future__ import annotations

import asyncio
import json

import mlflow
from helpers import TableSearch, Typer, built, mercury

from cts import tracking
from cts.roles.lexical import LexicalJudge
from cts.pipeline import Roles, run_job
from cts.roles.rules import RuleClarifier, RuleRewriter, RuleUserAnswerer


def test_one_trace_per_instance_with_spans_and_labels(services, tmp_path):
    inst, gold, table = mercury()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.prepare_store(uri)
    roles = Roles(clarifier=RuleClarifier(order=["scope", "time"], mode="sequential"), ua=built(RuleUserAnswerer, services),
                  rewriter=RuleRewriter(), search=TableSearch(table), judge=LexicalJudge(), qtyper=Typer())
    hook = lambda i, g, r, t: tracking.log_instance_trace(i, g, r, t, {"cts.system": "rules"})  # noqa: E731
    with tracking.job_run(uri, "traces", "job", {}) as run_id:
        records, _ = asyncio.run(run_job([inst], {"m1": gold}, roles, k=2, out_dir=tmp_path / "job",
                                         progress=False, models={"clarifier": "RuleClarifier"}, on_instance=hook))
        tracking.log_records_table(records)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name("traces")
    found = mlflow.search_traces(locations=[exp.experiment_id], run_id=run_id, return_type="list")
    assert len(found) == 1
    trace = found[0]
    tags = trace.info.tags
    assert (tags["cts.instance_id"], tags["cts.k"], tags["cts.mode"]) == ("m1", "2", "sequential")
    assert tags["cts.model.clarifier"] == "RuleClarifier" and tags["cts.system"] == "rules"
    names = [s.name for s in trace.data.spans]
    assert names[:5] == ["instance m1", "clarify turn 1", "clarify turn 2", "ua answer 1", "ua answer 2"]
    assert {"rewrite", "clarified arm", "orig arm", "search turn 1", "tool: search", "judge"} <= set(names)
    judges = [s for s in trace.data.spans if s.name == "judge"]
    labels = [s.outputs["labels"] for s in judges]
    assert {n: v["label"] for n, v in labels[0].items()} == dict(records[0].clarified.labels)
    assert labels[0]["n1"]["text"] == gold.nuggets[0].text
    for span in trace.data.spans:  # the hidden intent only reaches the UA spans' inputs
        ours = {k: v for k, v in span.attributes.items() if not k.startswith("mlflow.")}  # mlflow.* mirror inputs
        parts = {"inputs": span.inputs, "outputs": span.outputs, "attributes": ours}
        leaks = [p for p, v in parts.items() if inst.fused_query in json.dumps(v, ensure_ascii=False)]
        assert leaks == (["inputs"] if span.name.startswith("ua answer") else []), (span.name, leaks)
    mlflow.set_experiment("traces")
    table = mlflow.load_table("records_table.json", run_ids=[run_id], extra_columns=["run_id"])
    assert table["instance_id"].tolist() == ["m1"] and table["run_id"].tolist() == [run_id]
    assert json.loads(table["clarified_labels"][0]) == dict(records[0].clarified.labels)
    assert table["score"].tolist() == [records[0].score]


def test_tracer_is_an_option(tmp_path):
    from cts.tasks.evaluate import instance_tracer
    from cts.tasks.job import JobContext, RunInfo, Tracking

    def run(traces: bool) -> RunInfo:
        return RunInfo(JobContext({}, "k1", tmp_path, ""), Tracking("sqlite://", "x", instance_traces=traces), {}, {})

    assert instance_tracer(run(False)) is None
    assert instance_tracer(run(True)) is not None
