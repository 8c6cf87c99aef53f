"""The per-instance MLflow traces, pinned: an offline job's traces read back from the store must match committed digests.

A trace's view keeps what a reader sees in MLflow's UI and what the analyses read (span tree with
names, types, inputs, outputs, our attributes and status; tags; the trace's inputs and outputs;
every assessment) and drops what differs from run to run (ids, times, paths, sizes). Traces carry
corpus text, so only digests are committed. Regenerate (only from code whose traces are the
reference) with ``CTS_WRITE_TRACE_FIXTURE=1``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import mlflow
import pytest

from tests.runs import run_py

FIXTURE = Path(__file__).parents[1] / "fixtures" / "trace_digests.json"
_RUN_TO_RUN = frozenset({"elapsed_s", "latency_s"})
_KEPT_METADATA = ("mlflow.traceInputs", "mlflow.traceOutputs")


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in _RUN_TO_RUN}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _canon(value: Any) -> str:
    return json.dumps(_untimed(value), ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def span_rows(trace: Any) -> list[str]:
    """One canonical line per span: its path of names from the root, type, inputs, outputs, attributes, status."""
    spans = {s.span_id: s for s in trace.data.spans}

    def path(span: Any) -> str:
        names = []
        while span is not None:
            names.append(span.name)
            span = spans.get(span.parent_id)
        return " / ".join(reversed(names))

    rows = []
    for s in trace.data.spans:
        ours = {k: v for k, v in s.attributes.items() if not k.startswith("mlflow.")}
        rows.append(_canon([path(s), s.span_type, s.inputs, s.outputs, ours, str(s.status.status_code)]))
    return sorted(rows)


def assessment_rows(trace: Any) -> list[str]:
    """One canonical line per assessment: name, source, value, rationale, metadata, error."""
    rows = []
    for a in trace.info.assessments:
        value = a.feedback.value if a.feedback is not None else a.expectation.value
        error = a.feedback.error if a.feedback is not None else None
        err = (error.error_code, error.error_message) if error else None
        source = (a.source.source_type, a.source.source_id)
        rows.append(_canon([a.name, source, value, a.rationale, a.metadata or {}, err, a.expectation is not None]))
    return sorted(rows)


def trace_view(trace: Any) -> dict[str, Any]:
    """What a trace shows, without what differs from run to run."""
    info = trace.info
    tags = {k: v for k, v in info.tags.items() if k != "mlflow.artifactLocation"}
    metadata = {k: info.trace_metadata[k] for k in _KEPT_METADATA if k in info.trace_metadata}  # previews: cut JSON
    return {
        "state": str(info.state),
        "tags": tags,
        "metadata": metadata,
        "spans": span_rows(trace),
        "assessments": assessment_rows(trace),
    }


def digest(view: dict[str, Any]) -> str:
    """sha256 of a trace view's canonical JSON."""
    return hashlib.sha256(_canon(view).encode()).hexdigest()


def job_traces(uri: str, job_dir: Path) -> dict[str, dict[str, Any]]:
    """The views of a job's traces by instance id (the job dir names its run)."""
    run_id = json.loads((job_dir / "mlflow_run.json").read_text())["run_id"]
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    experiment = client.get_run(run_id).info.experiment_id
    found = mlflow.search_traces(locations=[experiment], run_id=run_id, return_type="list")
    views = {}
    for t in found:
        views[t.info.tags["cts.instance_id"]] = trace_view(client.get_trace(t.info.trace_id))
    return views


@pytest.mark.slow
def test_offline_traces_match_the_committed_digests(tmp_path: Path, cache_dir: Path) -> None:
    job = tmp_path / "job"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_py(
        "experiment=offline",
        "k=2",
        "limit=12",
        "tracking.instance_traces=true",
        f"hydra.run.dir={job}",
        f"tracking.uri={uri}",
        f"paths.cache_dir={cache_dir}",
    )
    views = job_traces(uri, job)
    records = [json.loads(x) for x in (job / "records.jsonl").read_text().splitlines() if x.strip()]
    assert sorted(views) == sorted(r["id"] for r in records)  # one trace per instance, none lost
    got = {i: digest(v) for i, v in sorted(views.items())}
    if os.environ.get("CTS_WRITE_TRACE_FIXTURE"):
        FIXTURE.write_text(json.dumps({"offline_k2_limit12": got}, indent=1, sort_keys=True) + "\n")
        return
    want = json.loads(FIXTURE.read_text())["offline_k2_limit12"]
    changed = {i: views[i]["spans"][:3] for i in want if got.get(i) != want[i]}
    assert sorted(got) == sorted(want) and not changed, changed


def test_clip_cuts_long_text_at_any_depth_and_keeps_the_json_shape() -> None:
    from types import MappingProxyType

    from cts.tracking._tracedoc import _TEXT_MAX, clip

    long = "页" * (_TEXT_MAX + 5)
    value = {"pages": [long, ("a", 1)], "meta": MappingProxyType({"k": long}), 3: None}
    out = clip(value)
    assert out == {
        "pages": [long[:_TEXT_MAX] + "... [5 more]", ["a", 1]],
        "meta": {"k": long[:_TEXT_MAX] + "... [5 more]"},
        "3": None,
    }
    assert clip(["x", ["y"]]) == ["x", ["y"]] and clip("short") == "short" and clip(7) == 7
