"""The queue and the labels round trip through a real MLflow store: an offline sweep, people simulated by the API.

``python -m cts.agreement queue`` tags the sample; the test records HUMAN feedback on the
queued traces as the UI does (name ``nugget.<id>`` / ``orig.nugget.<id>``, the annotator as
source id); ``python -m cts.agreement <sweep>`` reads them back, writes the same tables as from
a file, exports them, and logs the PPI metrics on the job runs. A wrong label is one error line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cts.core.records import read_records
from cts.data.human_labels import read_labels
from tests.prewarmed import run_script
from tests.runs import REPO, run_py

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("labels_in_mlflow")]  # one worker builds the queue
SYSTEMS = ("rules_scope", "rules_region")


def agreement(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    return run_script(["-m", "cts.agreement", *args], cwd=REPO, env=env, timeout=300)


@pytest.fixture(scope="module")
def queued(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("queue")
    sweep, uri = root / "sweep", f"sqlite:///{root / 'mlflow.db'}"
    run_py(
        "-m",
        "experiment=offline",
        f"clarifier={','.join(SYSTEMS)}",
        "k=1",
        "limit=20",
        "sweep_report=false",
        "tracking.instance_traces=true",
        f"hydra.sweep.dir={sweep}",
        f"tracking.uri={uri}",
        f"paths.cache_dir={cache_dir}",
        cwd=root,
    )
    proc = agreement("queue", str(sweep), "--n", "6", "--seed", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"sweep": sweep, "uri": uri, "out": proc.stdout}


def todo(uri: str) -> list[Any]:
    import mlflow

    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("cts").experiment_id
    return mlflow.search_traces(
        locations=[experiment], filter_string="tags.cts.review = 'todo'", return_type="list", include_spans=False
    )


def record(sweep: Path, run_id: str, instance: str) -> Any:
    for summary in sweep.glob("*/summary.json"):
        if json.loads(summary.read_text())["run_id"] == run_id:
            return next(r for r in read_records(summary.parent / "records.jsonl") if r.id == instance)
    raise KeyError(run_id)


def label_queue(queued: dict[str, Any], annotator: str) -> set[tuple[str, str, str, str]]:
    """Each queued trace's nuggets, both answers: the judge's label, but partial is none for this annotator."""
    import mlflow
    from mlflow.entities import AssessmentSource

    given = set()  # (instance, answer, nugget, label): an orig answer two jobs share is one
    for t in todo(queued["uri"]):
        run = t.info.request_metadata["mlflow.sourceRun"]
        r = record(queued["sweep"], run, t.info.tags["cts.instance_id"])
        for prefix, arm in (("nugget", r.clarified), ("orig.nugget", r.orig)):
            for n, label in arm.labels.items():
                value = "none" if label == "partial" else label
                source = AssessmentSource(source_type="HUMAN", source_id=annotator)
                mlflow.log_feedback(trace_id=t.info.trace_id, name=f"{prefix}.{n}", value=value, source=source)
                given.add((r.id, run if prefix == "nugget" else "orig", n, value))
    return given


def test_the_queue_is_exactly_what_the_ui_search_lists(queued: dict[str, Any]) -> None:
    found = todo(queued["uri"])
    assert len(found) == 6 and "tags.cts.review = 'todo'" in queued["out"]
    assert {t.info.tags["cts.review_arms"] for t in found} == {"clarified,orig"}
    systems = [json.loads(p.read_text())["run_id"] for p in queued["sweep"].glob("*/summary.json")]
    per_run = [sum(t.info.request_metadata["mlflow.sourceRun"] == r for t in found) for r in systems]
    assert per_run == [3, 3]  # split evenly over the two systems
    again = agreement("queue", str(queued["sweep"]), "--n", "6", "--seed", "3")
    assert again.returncode == 0 and {t.info.trace_id for t in todo(queued["uri"])} == {t.info.trace_id for t in found}


def test_a_new_draw_replaces_the_sweeps_earlier_queue(queued: dict[str, Any]) -> None:
    first = {t.info.trace_id for t in todo(queued["uri"])}
    other = agreement("queue", str(queued["sweep"]), "--n", "4", "--seed", "11")
    assert other.returncode == 0, other.stderr[-2000:]
    now = todo(queued["uri"])
    left = first - {t.info.trace_id for t in now}
    assert len(now) == 4 and left and f"{len(left)} trace(s) of an earlier queue" in other.stdout
    assert all("cts.review_arms" in t.info.tags for t in now)
    back = agreement("queue", str(queued["sweep"]), "--n", "6", "--seed", "3")  # the module's queue again
    assert back.returncode == 0 and {t.info.trace_id for t in todo(queued["uri"])} == first


def test_labels_recorded_on_the_traces_are_read_back_exported_and_logged(
    queued: dict[str, Any], tmp_path: Path
) -> None:
    given = label_queue(queued, "标注员")
    out = tmp_path / "labels.jsonl"
    proc = agreement(str(queued["sweep"]), "--n-resamples", "200", "--export", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    labels = read_labels(out)
    assert len(labels) == len(given) and {x.annotator for x in labels} == {"标注员"}
    assert all((queued["sweep"] / "agreement" / f"{t}.csv").is_file() for t in ("human_agreement", "human_ppi"))
    assert "n_labelled: rules_region k1 3, rules_scope k1 3" in proc.stdout
    from cts import tracking

    runs = tracking.search_runs(queued["uri"], "cts")
    logged = [r for r in runs.to_dict("records") if r.get("metrics.score_ppi") == r.get("metrics.score_ppi")]
    assert len(logged) == 2 and all(r["metrics.n_labelled"] == 3 for r in logged)
    from cts.report.build import ReportSettings, build_sweep_report
    from cts.stats import Resampling

    report = build_sweep_report(
        queued["sweep"], settings=ReportSettings(Resampling(200))
    )  # Table 3 gains the PPI columns
    assert report.ok and list(report.tables["delta_ci"]["n_labelled"]) == [3.0, 3.0]
    assert "Δ PPI [95% CI]" in (queued["sweep"] / "report" / "report.md").read_text()
    tables = {t: (queued["sweep"] / "agreement" / f"{t}.csv").read_text() for t in ("human_agreement", "human_ppi")}
    again = agreement(str(queued["sweep"]), "--labels", str(out), "--n-resamples", "200", "--no-log")
    assert again.returncode == 0  # the exported file gives the same tables as the store
    assert tables == {t: (queued["sweep"] / "agreement" / f"{t}.csv").read_text() for t in tables}


def test_a_wrong_label_is_one_error_line(queued: dict[str, Any]) -> None:
    import mlflow
    from mlflow.entities import AssessmentSource

    trace = todo(queued["uri"])[0].info.trace_id
    source = AssessmentSource(source_type="HUMAN", source_id="ann2")
    mlflow.log_feedback(trace_id=trace, name="nugget.n1", value="fulll", source=source)
    proc = agreement(str(queued["sweep"]), "--no-log")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1
    assert lines[0].startswith(f"error: trace {trace} (instance ") and "nugget n1 = 'fulll'" in lines[0]
