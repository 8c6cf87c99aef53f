"""notebooks/compare_runs.ipynb executes against a small sweep logged to a local MLflow store."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "compare_runs.ipynb"


def log_sweep(sweep: Path, uri: str, experiment: str) -> None:
    """Log each job dir of ``sweep`` as the app does: a tagged job run with metrics and artifacts."""
    from cts import report, tracking
    from cts.metrics import summarize

    tracking.prepare_store(uri)
    for job in report.load_jobs(sweep):
        tags = {"cts.kind": "job", "cts.system": job.system, "cts.k": str(job.k), "cts.sweep_dir": str(sweep),
                "cts.job_dir": job.job_dir, "cts.choice.clarifier": job.system}
        with tracking.job_run(uri, experiment, Path(job.job_dir).name, {"k": str(job.k)}, tags):
            tracking.log_metrics(summarize(list(job.records), k=job.k, n_resamples=200))
            tracking.log_artifacts([Path(job.job_dir) / "records.jsonl", Path(job.job_dir) / "summary.json"])


@pytest.mark.slow
def test_compare_runs_notebook_executes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from test_report import make_sweep

    monkeypatch.chdir(tmp_path)  # MLflow puts artifacts of a new experiment under ./mlruns
    sweep = make_sweep(tmp_path / "sweep")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    log_sweep(sweep, uri, "nb-test")
    for name, value in {"CTS_TRACKING_URI": uri, "CTS_EXPERIMENT": "nb-test", "CTS_N_RESAMPLES": "300",
                        "CTS_REPORT_DIR": str(tmp_path / "report")}.items():
        monkeypatch.setenv(name, value)  # the kernel inherits the environment
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()

    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    assert "5 job runs in 1 experiment(s)" in text
    assert "| 1 | rules_scope | 4 | 30.000 (+5.000) | 30.000 | 40.000 |" in text  # Table 2 from the sweep
    assert "Table 10." in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2  # score vs k, unknown vs region
    assert (tmp_path / "report" / "report.md").is_file()


def test_notebook_is_valid_and_parameterised_by_environment() -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    source = "\n".join(c.source for c in nb.cells)
    assert "mlflow.search_runs(search_all_experiments=True)" in source
    for var in ("CTS_TRACKING_URI", "CTS_EXPERIMENT", "CTS_SWEEP_DIR", "CTS_REPORT_DIR"):
        assert f'os.environ.get("{var}"' in source
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # committed without outputs
