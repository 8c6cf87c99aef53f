"""Reports label each row by the option chosen, read from the job's stored overrides.

A sweep of two rule clarifiers x two k x ``clarifier.mode=batch,sequential`` (a sub-key):
every table of the sweep report and of ``python -m cts.gating`` names ``rules_scope`` and
``rules_region`` apart, shows the mode as a column, and lists orig once per setting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from cts.core.records import ArmResult, Record
from cts.report.jobs import job_from_summary, label_jobs
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
SYSTEMS = {"rules_scope", "rules_region"}
MODES = {"batch", "sequential"}
# The columns that identify a row, per table (what must be distinct).
ROW_KEYS = {
    "gating": ("k", "System", "mode", "gate"),
    "frontier": ("System", "k", "mode", "gate"),
    "turn_region_only": ("k", "(System, turn)", "mode"),
    "region_only_range": ("Setting",),
}


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "HYDRA_FULL_ERROR": "1"}
    proc = run_script([*args], cwd=cwd, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def markdown_rows(path: Path) -> list[dict[str, str]]:
    """The rows of the Markdown table in ``path`` (a report's ``<table>.md``)."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
    header, body = cells[0], [c for c in cells[1:] if set(c) != {"---"}]
    return [dict(zip(header, row)) for row in body]


def system_of(row: dict[str, str]) -> str:
    return row["System"] if "System" in row else row["(System, turn)"].strip("()").rsplit(", ", 1)[0]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("labels")
    _run(
        str(REPO / "run.py"),
        "-m",
        "experiment=offline",
        "clarifier=rules_scope,rules_region",
        "k=1,2",
        "clarifier.mode=batch,sequential",
        "clarifier.stop_early=true",
        "limit=20",
        f"hydra.sweep.dir={root / 'sweep'}",
        f"tracking.uri=sqlite:///{root / 'store' / 'mlflow.db'}",
        f"paths.cache_dir={cache_dir}",
        "bootstrap.n_resamples=300",
        cwd=root,
    )
    return root / "sweep"


@pytest.mark.slow
@pytest.mark.xdist_group("report_labels")  # one worker builds the module's sweep
def test_every_report_table_labels_rows_by_option_with_mode_a_column(sweep: Path) -> None:
    tables = {p.stem: markdown_rows(p) for p in sorted((sweep / "report").glob("*.md")) if p.stem != "report"}
    assert {
        "scores",
        "delta_ci",
        "ua_diagnostics",
        "batch_vs_sequential",
        "gating",
        "frontier",
        "turn_region_only",
    } <= set(tables)
    for name, rows in tables.items():
        keys = ROW_KEYS.get(name, ("k", "System", "mode"))
        assert rows and all(set(keys) <= set(r) for r in rows), (name, rows[:1])
        identities = [tuple(r[key] for key in keys) for r in rows]
        assert len(set(identities)) == len(identities), f"{name}: rows not distinct"
        if name == "region_only_range":
            continue
        systems = {system_of(r) for r in rows}
        assert systems - {"orig"} <= SYSTEMS and "RuleClarifier" not in systems, (name, systems)
        assert SYSTEMS & systems, name
        assert {r["mode"] for r in rows if system_of(r) != "orig"} == MODES, name
    for name in ("scores", "delta_ci", "batch_vs_sequential", "gating"):
        assert {system_of(r) for r in tables[name]} - {"orig"} == SYSTEMS, name
        assert len(tables[name]) - sum(system_of(r) == "orig" for r in tables[name]) == (
            len(SYSTEMS) * len(MODES) * 2 * (4 if name == "gating" else 1)
        ), name
    # orig once per setting: one row per k in the scores table, one row on the frontier
    assert [r["k"] for r in tables["scores"] if r["System"] == "orig"] == ["1", "2"]
    assert sum(r["System"] == "orig" for r in tables["frontier"]) == 1


@pytest.mark.slow
@pytest.mark.xdist_group("report_labels")  # one worker builds the module's sweep
def test_gate_cli_labels_rows_by_option(sweep: Path) -> None:
    out = _run("-m", "cts.gating", str(sweep), "gate=rules", "bootstrap.n_resamples=200", cwd=REPO).stdout
    rows = json.loads((sweep / "gating" / "rules.json").read_text())["rows"]
    assert sorted((r["system"], r["k"], r["mode"]) for r in rows) == sorted(
        (s, k, m) for s in SYSTEMS for k in (1, 2) for m in MODES
    )
    md = markdown_rows(sweep / "gating" / "rules.md")
    assert sorted((r["system"], r["k"], r["mode"]) for r in md) == sorted(
        (r["system"], str(r["k"]), r["mode"]) for r in rows
    )
    assert "RuleClarifier" not in out


@pytest.mark.slow
@pytest.mark.xdist_group("report_labels")  # one worker builds the module's sweep
def test_overrides_are_stored_in_the_summary_and_the_run(sweep: Path) -> None:
    from cts import tracking
    from cts.report import ReportSettings, build_sweep_report
    from cts.stats import Resampling

    job = sweep / "clarifier.mode=sequential,clarifier=rules_region,k=2"
    summary = json.loads((job / "summary.json").read_text(encoding="utf-8"))
    assert {"clarifier=rules_region", "k=2", "clarifier.mode=sequential", "limit=20"} <= set(summary["overrides"])
    assert sorted(summary["swept"]) == ["clarifier", "clarifier.mode", "k"]
    uri = summary["tracking_uri"]
    run = tracking.search_runs(uri, summary["experiment"]).set_index("run_id").loc[summary["run_id"]]
    assert json.loads(run["tags.cts.overrides"]) == summary["overrides"]
    assert (run["tags.cts.factor.clarifier"], run["tags.cts.factor.clarifier.mode"]) == ("rules_region", "sequential")
    # The same labels from the MLflow experiment (artifacts) as from the dir: no job collapses into another.
    from_runs = build_sweep_report(
        summary["experiment"], sweep.parent / "from_runs", uri, settings=ReportSettings(Resampling(200))
    )
    assert from_runs.ok and from_runs.n_jobs == 8, from_runs.errors
    seq = from_runs.tables["batch_vs_sequential"]
    assert sorted(zip(seq["system"], seq["k"], seq["mode"])) == sorted(
        (s, k, m) for s in SYSTEMS for k in (1, 2) for m in MODES
    )


def _records(mode: str, n: int = 3) -> list[Record]:
    arm = ArmResult(query="q", score=50.0)
    return [
        Record(
            id=f"i{i}",
            k=1,
            questions=("Which?",),
            clarified=arm,
            orig=ArmResult(query="q", score=40.0),
            models={"clarifier": "RuleClarifier"},
            mode=mode,
        )
        for i in range(n)
    ]


def _summary(overrides: Sequence[str], swept: Sequence[str] | None, **choices: str) -> dict:
    return {"choices": {"judge": "lexical", **choices}, "k": 1, "overrides": list(overrides), "swept": swept}


def test_a_swept_sub_key_of_the_clarifier_is_not_a_new_system() -> None:
    """``clarifier.mode`` is a column; ``clarifier.stop_early`` joins the label; orig is one setting."""
    swept = ["clarifier", "clarifier.mode", "clarifier.stop_early"]
    jobs = label_jobs(
        [
            job_from_summary(
                _summary(
                    [f"clarifier={c}", f"clarifier.mode={m}", f"clarifier.stop_early={s}", "limit=3"],
                    swept,
                    clarifier=c,
                ),
                _records(m),
            )
            for c in ("rules_scope", "rules_region")
            for m in ("batch", "sequential")
            for s in ("true", "false")
        ]
    )
    assert sorted({(j.label, j.mode) for j in jobs}) == sorted(
        (f"{c}[clarifier.stop_early={s}]", m)
        for c in ("rules_scope", "rules_region")
        for m in MODES
        for s in ("True", "False")
    )  # Hydra's value, as the job dir names it
    assert {j.setting for j in jobs} == {""} and all(not j.factors.get("limit") for j in jobs)  # limit is not swept


def test_legacy_job_dirs_fall_back_to_the_run_name() -> None:
    """A summary without ``overrides`` (older versions) gives the same job as one with them."""
    choices = {"clarifier": "rules_region", "model@ua.model": "ernie", "ua": "ernie"}
    legacy = {
        "choices": {"judge": "lexical", **choices},
        "k": 2,
        "run_name": "clarifier.mode=batch,clarifier=rules_region,k=2",
    }
    stored = _summary(
        ["clarifier=rules_region", "k=2", "clarifier.mode=batch", "tracking.uri=sqlite\\:///x.db"],
        ["clarifier", "k", "clarifier.mode"],
        **choices,
    )
    old, new = (job_from_summary(s, _records("batch")) for s in (legacy, stored))
    assert (old.system, old.variant, old.factors) == (new.system, new.variant, new.factors)
    assert new.system == "rules_region" and new.variant == {"clarifier.mode": "batch"}
    assert new.factors == {"judge": "lexical", "ua": "ernie"}  # model@ua.model follows from ua; routing is not swept


def test_without_recorded_sweep_keys_every_override_is_a_factor() -> None:
    job = job_from_summary(
        _summary(["clarifier=rules_scope", "seed=3", "k=1"], None, clarifier="rules_scope"), _records("batch")
    )
    assert (job.system, job.factors) == ("rules_scope", {"judge": "lexical", "seed": "3"})


def test_stored_overrides_mask_secrets_and_stay_hydra_syntax() -> None:
    from cts._util import naming
    from cts.compose.job_config import stored_overrides

    written = [
        "services.llm.api_key=sk-live-1",
        "services.llm.api_key=${oc.env:KEY}",
        "services.llm.cache.url=postgresql://u:pw@h/db",
        "clarifier=rules_scope",
        "dataset.name='a b'",
    ]
    stored = stored_overrides(written)
    assert "sk-live-1" not in json.dumps(stored) and ":pw@" not in json.dumps(stored)
    assert stored[3:] == written[3:]  # the rest as written
    assert naming.factors(stored) == {
        "services.llm.api_key": "***",
        "clarifier": "rules_scope",
        "dataset.name": "a b",
        "services.llm.cache.url": "postgresql://u:***@h/db",
    }


def test_override_tags_fit_mlflow() -> None:
    from cts.tracking import override_tags

    tags = override_tags(["clarifier=gpt", "model@clarifier.model=claude", "k=1"], ["model@clarifier.model", "k"])
    assert json.loads(tags["cts.overrides"]) == ["clarifier=gpt", "model@clarifier.model=claude", "k=1"]
    assert {k: v for k, v in tags.items() if k.startswith("cts.factor.")} == {
        "cts.factor.model_clarifier.model": "claude",
        "cts.factor.k": "1",
    }  # '@' is not a tag-name character
    long = override_tags([f"dataset.path{i}=/{'x' * 100}" for i in range(100)], [])
    assert len(long["cts.overrides"]) <= 5000 and int(long["cts.overrides_truncated"]) > 0
    assert all(o.startswith("dataset.path") for o in json.loads(long["cts.overrides"]))


def test_frontier_lists_orig_once_per_setting() -> None:
    """Jobs of one setting share the orig arm; its mean differs only by summation order (records finish in
    any order)."""
    import pandas as pd

    from cts.report.beyond import frontier_rows

    def rows(system: str, setting: str, orig: float) -> list[dict]:
        return [
            {
                "system": system,
                "k": 1,
                "mode": "batch",
                "setting": setting,
                "gate": gate,
                "score_mean": score,
                "cost_per_instance": cost,
                "cost_unit": "questions",
                "questions_per_instance": cost,
            }
            for gate, score, cost in (("never", orig, 0.0), ("always", 30.0, 1.0))
        ]

    gating = pd.DataFrame([*rows("a", "", 21.916666666666668), *rows("b", "", 21.916666666666664)])
    assert list(frontier_rows(gating)["system"]).count("orig") == 1
    two = pd.DataFrame([*rows("a[judge=x]", "judge=x", 20.0), *rows("a[judge=y]", "judge=y", 10.0)])
    origs = frontier_rows(two).query("gate == 'never'").set_index("system")["score_mean"]
    assert origs.to_dict() == {"orig[judge=y]": 10.0, "orig[judge=x]": 20.0}
