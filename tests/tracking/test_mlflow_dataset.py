"""The dataset in MLflow: one digest per dataset whatever order a job finished its instances in; tables in dataset order."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import mlflow
import pytest

from cts import tracking
from cts.core.types import QA, Instance, SearchResult
from cts.data.jsonl import Dataset
from cts.protocol.pipeline import Roles
from cts.protocol.spend import SpendLimit
from cts.tasks.evaluate import EvalProtocol, Resume, evaluate_task
from cts.tasks.job import Execution, JobContext, RunInfo, Tracking
from tests.helpers import Typer, gold_for

N = 6
INSTANCES = tuple(Instance(f"i{n}", f"topic {n}", f"topic {n}, the intended one") for n in range(N))
DATASET = Dataset(
    "tiny", INSTANCES, {i.id: gold_for(i.id, (f"fact of topic {n}", 1), ("more", 2)) for n, i in enumerate(INSTANCES)}
)


class Ordered:
    """Roles whose search of instance n takes ``delay(n)``: the job finishes its instances in that order."""

    def __init__(self, reverse: bool) -> None:
        self.reverse = reverse

    def _delay(self, query: str) -> float:
        n = int(query.split()[1].rstrip(","))
        return 0.03 * ((N - n) if self.reverse else n)

    async def ask(self, blurred_query: str, k: int) -> list[str]:
        return ["Which one?"]

    async def answer(self, fused_query: str, question: str) -> str:
        return "the intended one"

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str:
        return f"{blurred_query}, the intended one"

    async def search(self, query: str) -> SearchResult:
        await asyncio.sleep(self._delay(query))
        return SearchResult(answer="fact of topic" if "intended" in query else "", trace=({"tool": "search"},))

    async def judge(self, answer: str, nuggets: Sequence) -> dict[str, str]:  # noqa: ANN001
        return {n.id: ("full" if answer else "none") for n in nuggets}


def _job(tmp_path: Path, name: str, reverse: bool, uri: str) -> Path:
    roles = Ordered(reverse)
    job_dir = tmp_path / name
    run = RunInfo(JobContext({}, name, job_dir, ""), Tracking(uri, "cts-test"), {"k": 1}, {"cts.kind": "job"})
    evaluate_task(
        dataset=DATASET,
        roles=Roles(roles, roles, roles, roles, roles, Typer()),
        protocol=EvalProtocol(1),
        run=run,
        resume=Resume("f", {}, "rerun", False),
        execution=Execution(SpendLimit(None, 5.0, lambda usd, d: None), N, models={"judge": "ordered"}),
    )
    return job_dir


def test_one_dataset_one_digest_whatever_the_completion_order(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    dirs = [_job(tmp_path, "forward", False, uri), _job(tmp_path, "backward", True, uri)]
    finished = [[json.loads(line)["id"] for line in (d / "records.jsonl").read_text().splitlines()] for d in dirs]
    assert finished[0] != finished[1] and sorted(finished[0]) == sorted(finished[1])  # two completion orders
    mlflow.set_tracking_uri(uri)
    exp = mlflow.set_experiment("cts-test")
    runs = mlflow.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"], output_format="list")
    inputs = [
        [(d.dataset.name, d.dataset.digest, d.dataset.source_type) for d in r.inputs.dataset_inputs] for r in runs
    ]
    assert len(inputs) == 2 and inputs[0] == inputs[1] and len(inputs[0]) == 1
    name, digest, _ = inputs[0][0]
    assert name == "tiny" and digest == tracking.dataset_digest(tracking.dataset_rows(INSTANCES, DATASET.gold))
    assert digest != tracking.dataset_digest(tracking.dataset_rows(INSTANCES[::-1], DATASET.gold))  # order matters
    for r in runs:  # the records table lists the instances in dataset order, with their run and trace
        table = mlflow.load_table("records_table.json", run_ids=[r.info.run_id])
        assert table["instance_id"].tolist() == [i.id for i in INSTANCES]
        assert set(table["run_id"]) == {r.info.run_id} and table["trace_id"].str.startswith("tr-").all()
    from mlflow.genai.datasets import search_datasets

    found = search_datasets(experiment_ids=[exp.experiment_id])
    assert [d.name for d in found] == [f"tiny-{digest[:8]}"]  # the Datasets tab: once per digest
    records = found[0].to_df()
    assert sorted(r["instance_id"] for r in records["inputs"]) == sorted(i.id for i in INSTANCES)
    assert "fused_query" not in json.dumps(list(records["inputs"]))


def test_a_resumed_job_keeps_one_row_per_instance_and_one_dataset_input(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for _ in range(2):  # the second run finds every instance done and logs the dir's records again
        _job(tmp_path, "forward", False, uri)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.set_experiment("cts-test")
    (run,) = mlflow.search_runs([exp.experiment_id], output_format="list")
    assert run.data.tags["cts.resumes"] == "1" and len(run.inputs.dataset_inputs) == 1
    table = mlflow.load_table("records_table.json", run_ids=[run.info.run_id])
    assert table["instance_id"].tolist() == [i.id for i in INSTANCES]
    assert table["trace_id"].str.startswith("tr-").all()  # the traces the first run logged, found again


@pytest.mark.parametrize("limit", [2, N])
def test_the_digest_covers_what_the_job_evaluates(limit: int) -> None:
    rows = tracking.dataset_rows(INSTANCES[:limit], DATASET.gold)
    assert [r["instance_id"] for r in rows] == [i.id for i in INSTANCES[:limit]]
    assert rows[0]["gold_nuggets"][0] == {"id": "n1", "text": "fact of topic 0", "weight": 1}
    other = tracking.dataset_rows(INSTANCES[:limit], {**DATASET.gold, "i0": gold_for("i0", ("changed", 1))})
    assert tracking.dataset_digest(rows) != tracking.dataset_digest(other)  # the gold is part of the dataset


def test_a_lost_race_to_insert_the_dataset_is_retried_and_a_dead_server_only_warns(monkeypatch, caplog) -> None:
    """Jobs of a Slurm array insert one dataset at once: the server's unique-key error is retried, never fatal."""
    from cts.tracking import _datasets

    monkeypatch.setattr(_datasets.time, "sleep", lambda s: None)

    class Flaky:
        """The MLflow module as ``_log_input`` uses it: the active run, a client's ``log_inputs``."""

        entities = mlflow.entities

        def __init__(self, failures: int) -> None:
            self.failures, self.calls = failures, 0

        def active_run(self):  # noqa: ANN201 - mlflow's signature
            return SimpleNamespace(info=SimpleNamespace(run_id="r1"))

        def MlflowClient(self):  # noqa: ANN201, N802 - mlflow's name
            return self

        def log_inputs(self, run_id, datasets):  # noqa: ANN001, ANN201 - mlflow's signature
            self.calls += 1
            assert run_id == "r1" and datasets[0].tags[0].value == "evaluation"
            if self.calls <= self.failures:
                raise RuntimeError('duplicate key value violates unique constraint "dataset_pk"')

    entity = mlflow.entities.Dataset(name="d", digest="0" * 16, source_type="code", source="{}")
    once = Flaky(1)
    _datasets._log_input(once, entity)
    assert once.calls == 2
    dead = Flaky(99)
    with caplog.at_level("WARNING", logger="cts.tracking._datasets"):
        _datasets._log_input(dead, entity)
    assert dead.calls == _datasets.INPUT_ATTEMPTS and "was not logged" in caplog.text
