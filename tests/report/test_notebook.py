"""notebooks/compare_runs.ipynb executes against a small sweep logged to a local MLflow store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "compare_runs.ipynb"


@pytest.mark.slow
def test_compare_runs_notebook_executes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from tests.runs import run_py

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_py(
        "-m",
        "experiment=offline",
        "clarifier=rules_scope,none",
        "k=1,2",
        "limit=20",
        "tracking.instance_traces=true",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"tracking.uri={uri}",
        "tracking.experiment=nb-test",
        f"paths.cache_dir={cache_dir}",
        cwd=tmp_path,
    )
    for name, value in {
        "CTS_TRACKING_URI": uri,
        "CTS_EXPERIMENT": "nb-test",
        "CTS_N_RESAMPLES": "300",
        "CTS_REPORT_DIR": str(tmp_path / "report"),
    }.items():
        monkeypatch.setenv(name, value)  # the kernel inherits the environment
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()

    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    assert "4 job runs in 1 experiment(s)" in text
    assert re.search(r"\| 1 \| rules_scope \| 20 \| [0-9.]+ \(\+[0-9.]+\) \|", text)  # Table 2 row
    assert "Table 10." in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 4  # score vs k, unknown vs region, frontier, score vs questions
    assert "where exactly one helped" in text
    # each instance of the comparison links to both runs' traces of it, side by side in mlflow ui
    assert re.search(
        r"demo-\d+: http://127\.0\.0\.1:5000/#/experiments/\d+/runs/\w+/evaluations"
        r"\?compareToRunUuid=\w+&selectedEvaluationId=tr-[0-9a-f]+",
        text,
    )
    assert (tmp_path / "report" / "report.md").is_file()


def test_notebook_is_valid_and_parameterised_by_environment() -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    source = "\n".join(c.source for c in nb.cells)
    assert (
        "tracking.job_runs(TRACKING_URI, EXPERIMENT)" in source
    )  # every experiment, one run per job dir, store locked
    for var in ("CTS_TRACKING_URI", "CTS_EXPERIMENT", "CTS_SWEEP_DIR", "CTS_REPORT_DIR", "CTS_MLFLOW_UI"):
        assert f'os.environ.get("{var}"' in source
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # committed without outputs
