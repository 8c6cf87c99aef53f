"""Human labels in, agreement out: ``python -m cts.agreement <sweep> --labels <file>`` over an offline sweep.

The labels file is written by the test from a documented rule, blind to the corpus: three
annotators label every nugget of the clarified arm (``rules_scope-k1``) and the orig arm of
the sweep's first 30 instances (by id). Counting the labelled nuggets in that order (i = 0, 1, ...):

- ``a1`` gives the lexical judge's label, one level lower where i % 4 == 0;
- ``a2`` the judge's label, one level higher where i % 5 == 1;
- ``a3`` the judge's label rotated (full -> none -> partial -> full) where i % 3 == 2.

Every number of the three tables is then recomputed here by other code: kappa by scikit-learn,
alpha by the textbook formula, the intervals by a loop that redraws the same clusters, the
confusion matrix by counting, the judge's score from the records and the human score from the
demo's gold with ``restore_score``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cts.core.records import read_records
from cts.core.scoring import majority_label, restore_score
from tests.agreement_checks import loop_bootstrap, sklearn_kappa, textbook_ordinal_alpha
from tests.prewarmed import run_script
from tests.runs import REPO, run_py

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("human_agreement")]  # one worker builds the study

RESAMPLES, SEED, LEVEL = 300, 3, 0.9
CODE = {"none": 0, "partial": 1, "full": 2}
DOWN = {"full": "partial", "partial": "none", "none": "none"}
UP = {"none": "partial", "partial": "full", "full": "full"}
ROTATE = {"full": "none", "none": "partial", "partial": "full"}


def write_labels(sweep: Path, path: Path) -> list[dict[str, str]]:
    """The labels of the module docstring's rule, from the recorded labels of rules_scope k=1."""
    records = sorted(read_records(sweep / "clarifier=rules_scope" / "records.jsonl"), key=lambda r: r.id)[:30]
    rows, i = [], 0
    for r in records:
        for arm, result in (("rules_scope-k1", r.clarified), ("orig", r.orig)):
            for nugget, label in sorted(result.labels.items()):
                given = {
                    "a1": DOWN[label] if i % 4 == 0 else label,
                    "a2": UP[label] if i % 5 == 1 else label,
                    "a3": ROTATE[label] if i % 3 == 2 else label,
                }
                rows += [dict(instance=r.id, arm=arm, nugget=nugget, label=v, annotator=a) for a, v in given.items()]
                i += 1
    path.write_text("".join(json.dumps(x) + "\n" for x in rows), encoding="utf-8")
    return rows


def agreement(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    return run_script(["-m", "cts.agreement", *args], cwd=REPO, env=env, timeout=300)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("agreement")
    sweep, uri = root / "sweep", f"sqlite:///{root / 'mlflow.db'}"
    run_py(
        "-m",
        "experiment=offline",
        "clarifier=rules_scope,none",
        "k=1",
        "limit=40",
        "tracking.instance_traces=true",
        f"hydra.sweep.dir={sweep}",
        f"tracking.uri={uri}",
        f"paths.cache_dir={cache_dir}",
        cwd=root,
    )
    rows = write_labels(sweep, root / "labels.jsonl")
    args = [str(sweep), "--labels", str(root / "labels.jsonl"), "--n-resamples", str(RESAMPLES)]
    proc = agreement(*args, "--seed", str(SEED), "--confidence", str(LEVEL))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"sweep": sweep, "uri": uri, "rows": rows, "out": proc.stdout, "root": root}


def table(study: dict[str, Any], name: str) -> pd.DataFrame:
    return pd.read_csv(study["sweep"] / "agreement" / f"{name}.csv")


def by_annotator(rows: list[dict[str, str]]) -> dict[str, dict[tuple[str, str, str], str]]:
    out: dict[str, dict[tuple[str, str, str], str]] = {}
    for x in rows:
        out.setdefault(x["annotator"], {})[(x["instance"], x["arm"], x["nugget"])] = x["label"]
    out["majority"] = {u: majority_label([out[a][u] for a in ("a1", "a2", "a3")]) for u in out["a1"]}  # type: ignore[misc]
    return out


def judge_units(study: dict[str, Any]) -> dict[tuple[str, str, str], str]:
    records = read_records(study["sweep"] / "clarifier=rules_scope" / "records.jsonl")
    out = {}
    for r in records:
        for arm, result in (("rules_scope-k1", r.clarified), ("orig", r.orig)):
            out.update({(r.id, arm, n): v for n, v in result.labels.items()})
    return out


def test_inter_annotator_alpha_comes_first_and_is_the_textbook_value(study: dict[str, Any]) -> None:
    ceiling = table(study, "human_ceiling")
    humans = by_annotator(study["rows"])
    units = sorted(humans["a1"])
    data = np.array([[CODE[humans[a][u]] for u in units] for a in ("a1", "a2", "a3")], dtype=float)
    clusters = [u[0] for u in units]
    first = ceiling.iloc[0]
    assert first["annotators"].startswith("all") and first["n_labels"] == 3 * len(units)
    assert first["alpha"] == pytest.approx(textbook_ordinal_alpha(data), abs=1e-9)
    low, high = loop_bootstrap(clusters, lambda ix: textbook_ordinal_alpha(data[:, ix]), RESAMPLES, SEED, LEVEL)
    assert (first["alpha_low"], first["alpha_high"]) == pytest.approx((low, high), abs=1e-9)
    pair = ceiling[ceiling["annotators"] == "a1 vs a3"].iloc[0]
    assert pair["kappa"] == pytest.approx(sklearn_kappa(data[0], data[2]), abs=1e-12)


@pytest.mark.parametrize("reference", ["a1", "a2", "a3", "majority"])
def test_kappa_alpha_and_their_intervals_match_independent_code(study: dict[str, Any], reference: str) -> None:
    row = table(study, "human_agreement").set_index("reference").loc[reference]
    human, judge = by_annotator(study["rows"])[reference], judge_units(study)
    units = sorted(human)  # by (instance, arm), then nugget: the order the items are resampled in
    x = np.array([CODE[judge[u]] for u in units])
    y = np.array([CODE[human[u]] for u in units])
    clusters = [u[0] for u in units]
    assert row["judge"] == "lexical" and row["n_labels"] == len(units)
    assert row["kappa"] == pytest.approx(sklearn_kappa(x, y), abs=1e-12)
    assert row["exact"] == pytest.approx(float(np.mean(x == y)))
    low, high = loop_bootstrap(clusters, lambda ix: sklearn_kappa(x[ix], y[ix]), RESAMPLES, SEED, LEVEL)
    assert (row["kappa_low"], row["kappa_high"]) == pytest.approx((low, high), abs=1e-9)
    pair = np.array([x, y], dtype=float)
    assert row["alpha"] == pytest.approx(textbook_ordinal_alpha(pair), abs=1e-9)
    low, high = loop_bootstrap(clusters, lambda ix: textbook_ordinal_alpha(pair[:, ix]), RESAMPLES, SEED, LEVEL)
    assert (row["alpha_low"], row["alpha_high"]) == pytest.approx((low, high), abs=1e-9)
    assert row["n_clusters"] == 30


def test_confusion_matrix_counts_majority_against_judge(study: dict[str, Any]) -> None:
    confusion = table(study, "human_confusion")
    majority, judge = by_annotator(study["rows"])["majority"], judge_units(study)
    mine = confusion[confusion["reference"] == "majority"].set_index("human")
    for h in ("none", "partial", "full"):
        for j in ("none", "partial", "full"):
            want = sum(1 for u, v in majority.items() if v == h and judge[u] == j)
            assert mine.loc[h, f"judge_{j}"] == want, (h, j)
    assert mine.to_numpy()[:, -3:].sum() == len(majority)


def test_score_shift_is_judge_minus_human_score(study: dict[str, Any], services: Any) -> None:
    from cts.demo.loading import load_demo

    gold = load_demo(
        services.corpus, services.index, services.cache_dir, n=200, seed=0
    ).gold  # the demo set the sweep ran on
    records = {r.id: r for r in read_records(study["sweep"] / "clarifier=rules_scope" / "records.jsonl")}
    human = by_annotator(study["rows"])["a3"]
    arms = sorted({(u[0], u[1]) for u in human})
    diffs, clusters = [], []
    for instance, arm in arms:
        labels = {u[2]: v for u, v in human.items() if u[:2] == (instance, arm)}
        recorded = records[instance].clarified if arm != "orig" else records[instance].orig
        diffs.append(recorded.score - restore_score(labels, gold[instance].nuggets))  # type: ignore[arg-type,operator]
        clusters.append(instance)
    row = table(study, "human_agreement").set_index("reference").loc["a3"]
    assert row["n_arms"] == 60 and row["shift"] == pytest.approx(np.mean(diffs))
    d = np.array(diffs)
    low, high = loop_bootstrap(clusters, lambda ix: float(d[ix].mean()), RESAMPLES, SEED, LEVEL)
    assert (row["shift_low"], row["shift_high"]) == pytest.approx((low, high), abs=1e-9)


def test_report_shows_the_section_and_mlflow_has_metrics_and_expectations(study: dict[str, Any]) -> None:
    import mlflow

    proc = run_script(
        ["-m", "cts.report", str(study["sweep"]), "--n-resamples", "200"],
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = (study["sweep"] / "report" / "report.md").read_text(encoding="utf-8")
    assert "Agreement among the annotators" in page and "Judge vs people" in page
    # 30 instances x 4 references (a1..a3, majority): both arms on rules_scope's traces, orig on none's
    assert "MLflow: metrics on 2 job run(s), 360 expectation(s)" in study["out"]
    row = table(study, "human_agreement").set_index("reference").loc["majority"]
    mlflow.set_tracking_uri(study["uri"])
    run_id = json.loads((study["sweep"] / "clarifier=rules_scope" / "summary.json").read_text())["run_id"]
    run = mlflow.MlflowClient().get_run(run_id)
    metrics = run.data.metrics
    assert metrics["human_kappa"] == pytest.approx(row["kappa"]) and metrics["human_score_shift"] == pytest.approx(
        row["shift"]
    )
    traces = mlflow.search_traces(locations=[run.info.experiment_id], run_id=run_id, return_type="list")
    found = {
        a.name: a
        for t in traces
        if t.info.tags.get("cts.instance_id") == study["rows"][0]["instance"]
        for a in t.info.assessments
    }
    a1 = found["human_labels.a1"]
    assert a1.source.source_type == "HUMAN" and a1.source.source_id == "a1"
    want = sorted(
        (x["nugget"], x["label"])
        for x in study["rows"]
        if x["annotator"] == "a1" and x["arm"] == "rules_scope-k1" and x["instance"] == study["rows"][0]["instance"]
    )
    assert a1.expectation.value == " ".join(f"{n}={v}" for n, v in want)


def test_bad_labels_are_refused_with_their_lines(study: dict[str, Any]) -> None:
    bad = study["root"] / "bad.csv"
    first = study["rows"][0]
    bad.write_text(
        "instance,arm,nugget,label,annotator\n"
        f"{first['instance']},rules_scope-k9,n1,full,a1\n"
        f"{first['instance']},orig,n1,great,a1\n"
        f"nope,orig,n1,full,a1\n",
        encoding="utf-8",
    )
    proc = agreement(str(study["sweep"]), "--labels", str(bad), "--no-log")
    assert proc.returncode == 1
    assert f"{bad}:3: label: 'great' is not one of full, partial, none" in proc.stderr
    fixed = bad.with_name("arms.csv")
    fixed.write_text(bad.read_text().replace("great", "none"), encoding="utf-8")
    proc = agreement(str(study["sweep"]), "--labels", str(fixed), "--no-log")
    assert proc.returncode == 1
    assert "line 2: arm: 'rules_scope-k9' is not an arm of the sweep (orig, rules_scope-k1)" in proc.stderr
    assert "line 4: instance: 'nope' is not an instance of the sweep" in proc.stderr
