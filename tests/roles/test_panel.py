"""Judge panels: ``judge=panel 'judge/members=[...]' judge.aggregate=...`` over three emulated judges.

Three registry models on a scripted server disagree in known ways, per nugget ``n<i>``:
``ja`` says full, ``jc`` says none, ``jb`` says full / partial / none as i % 3 is 1 / 2 / 0.
So the majority is full where jb says full and none elsewhere (a three-way tie goes to the
lowest label), the mean credit (1 + c + 0) / 3 is always partial, and min is always none;
no nugget has all three members agree, and the pairs' kappas follow from the same rule.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from cts.core.records import read_records
from cts.core.types import Nugget
from cts.roles.lexical import LexicalJudge
from cts.roles.panel import PanelJudge, mean_label, min_label
from tests.agreement_checks import sklearn_kappa
from tests.llm_fakes import ScriptedServer
from tests.runs import run_py

MODEL = """_target_: cts.llm.ModelSpec
name: {name}
id: openai/{name}
api_base: {base}
api_key_env: null
params: {{temperature: 0}}
input_cost_per_token: 0
output_cost_per_token: 0
max_concurrency: null
"""
CODE = {"none": 0, "partial": 1, "full": 2}


def member_label(model: str, nugget: str) -> str:
    i = int(nugget.lstrip("n"))
    return {"ja": "full", "jc": "none"}.get(model) or ("full", "partial", "none")[(i - 1) % 3]


def emulated_judges(body: Any) -> str:
    """Prompt E's reply of the model the request names (see the module docstring)."""
    user = body["messages"][-1]["content"]
    if "Nuggets:" not in user:
        return "ok"  # the pre-flight's completion probe
    ids = re.findall(r"^(n\d+): ", user.split("Nuggets:", 1)[1], re.MULTILINE)
    model = str(body["model"]).rsplit("/", 1)[-1]
    return json.dumps({n: member_label(model, n) for n in ids})


def test_aggregates_and_their_tie_rule() -> None:
    assert mean_label(["full", "partial", "none"]) == "partial"
    assert mean_label(["full", "none"]) == "partial"
    assert mean_label(["partial", "none"]) == "none"  # mean credit 0.25: a tie goes down
    assert mean_label(["full", "full", "partial"]) == "full"
    assert min_label(["full", "partial", "full"]) == "partial"
    with pytest.raises(ValueError, match="at least 2 members"):
        PanelJudge({"a": LexicalJudge()})
    with pytest.raises(ValueError, match="aggregate must be"):
        PanelJudge({"a": LexicalJudge(), "b": LexicalJudge()}, aggregate="median")  # type: ignore[arg-type]


def test_offline_members_keep_their_labels() -> None:
    panel = PanelJudge({"loose": LexicalJudge(0.5, 0.2), "strict": LexicalJudge(1.0, 0.9)}, aggregate="min")
    nuggets = [Nugget("n1", "alpha beta gamma delta", 1)]
    verdict = asyncio.run(panel.judge_members("alpha beta gamma", nuggets))
    assert verdict.members == {"loose": {"n1": "full"}, "strict": {"n1": "none"}}
    assert verdict.labels == {"n1": "none"}


@pytest.mark.slow
def test_panel_over_three_emulated_judges(tmp_path: Path, cache_dir: Path) -> None:
    with ScriptedServer() as server:
        server.handler = emulated_judges
        models = tmp_path / "models" / "model"
        models.mkdir(parents=True)
        for name in ("ja", "jb", "jc"):
            (models / f"{name}.yaml").write_text(MODEL.format(name=name, base=server.base_url))
        sweep = tmp_path / "sweep"
        run_py(
            "--config-dir",
            str(tmp_path / "models"),
            "-m",
            "experiment=offline",
            "judge=panel",
            "judge/members=[ja,jb,jc]",
            "judge.aggregate=majority,mean,min",
            "limit=6",
            "sweep_report=false",  # read by no test here
            f"hydra.sweep.dir={sweep}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"paths.cache_dir={cache_dir}",
            "services.llm.cache.mode=off",
            "judge_anchors.check=false",  # a scripted judge: the anchor check (docs/judges.md) would refuse it before the run
            cwd=tmp_path,
        )
        assert {str(b["model"]).rsplit("/", 1)[-1] for b in server.bodies()} == {"ja", "jb", "jc"}
    want = {
        "majority": lambda b: "full" if b == "full" else "none",
        "mean": lambda b: "partial",
        "min": lambda b: "none",
    }
    for aggregate, rule in want.items():
        job = sweep / f"judge.aggregate={aggregate}"
        records = list(read_records(job / "records.jsonl"))
        assert len(records) == 6
        codes: dict[str, list[int]] = {"ja": [], "jb": [], "jc": []}
        for r in records:
            for arm in (r.clarified, r.orig):
                assert arm is not None and arm.error is None
                assert set(arm.judge_members) == {"ja", "jb", "jc"}
                for n, label in arm.labels.items():
                    b = member_label("jb", n)
                    assert {m: arm.judge_members[m][n] for m in codes} == {"ja": "full", "jb": b, "jc": "none"}
                    assert label == rule(b), (aggregate, n)
                    for m in codes:
                        codes[m].append(CODE[arm.judge_members[m][n]])
        metrics = json.loads((job / "summary.json").read_text())["metrics"]
        assert metrics["judge_members"] == 3 and metrics["judge_members_agreement"] == 0.0
        assert metrics["judge_members_n_labels"] == len(codes["ja"])
        for a, b in (("ja", "jb"), ("ja", "jc"), ("jb", "jc")):
            assert metrics[f"judge_members_kappa.{a}.{b}"] == pytest.approx(sklearn_kappa(codes[a], codes[b])), (a, b)
