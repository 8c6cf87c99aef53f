"""Judge probes: nuggets shuffled, the answer padded, the call repeated (``experiment=judge_probes``).

On the offline lexical judge the shuffle and repeat flip rates are exactly 0 (it labels each
nugget on its own, deterministically); judges built to be sensitive show the flips their
construction implies; the repeat probe reaches an LLM server past the response cache.
"""

from __future__ import annotations

import asyncio
import csv
import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from cts.analysis.judge_probes import Probing, padding, probe_all, probe_rows, shuffled
from cts.analysis.judge_robustness import FrozenArm
from cts.compose.services import Services
from cts.core.types import Gold, Label, Nugget
from cts.llm import current_sample
from cts.roles.lexical import LexicalJudge
from cts.roles.llm import LLMJudge
from cts.stats.bootstrap import Resampling
from cts.text.tokens import content_tokens, is_cjk
from tests.helpers import built
from tests.llm_server import ScriptedServer, llm_settings
from tests.runs import run_py

GOLD = {
    "a": Gold("a", tuple(Nugget(f"n{i}", f"alpha fact {i}", 1) for i in range(1, 5))),
    "b": Gold("b", tuple(Nugget(f"n{i}", f"beta fact {i}", 2) for i in range(1, 4))),
    "c": Gold("c", (Nugget("n1", "长城 始建 于 春秋", 1), Nugget("n2", "明朝 重修", 1))),
}
ARMS = [
    FrozenArm("orig", "a", "alpha fact 1 and alpha fact 2 " + "x" * 40),
    FrozenArm("orig", "b", "beta fact 1, nothing more"),
    FrozenArm("rules_scope-k1", "b", "beta fact 1, beta fact 3 and a long tail " + "y" * 300),
    FrozenArm("orig", "c", "长城始建于春秋战国时期"),
    FrozenArm("orig", "a", "unrelated words about zebras and quokkas"),
    FrozenArm("orig", "a", "另一个关于黄河的回答，没有相关内容"),
]


class Positional:
    """Labels the first nugget it is shown full and the rest none: as order-bound as a judge can be."""

    async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]:
        return {n.id: ("full" if i == 0 else "none") for i, n in enumerate(nuggets)}


class LengthBound:
    """Full for an answer under 100 characters, none for a longer one."""

    async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]:
        return {n.id: ("full" if len(answer) < 100 else "none") for n in nuggets}


class Drifting:
    """Full at repeat 0, partial at any other repeat."""

    async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]:
        return {n.id: ("full" if current_sample().repeat == 0 else "partial") for n in nuggets}


def probe(judge: object, probes: Sequence[str]) -> dict[str, dict[str, float]]:
    found = asyncio.run(probe_all(ARMS, GOLD, judge, Probing(probes, seed=3)))  # type: ignore[arg-type]
    rows = probe_rows(found, GOLD, {}, Resampling(n_resamples=200))
    return {r["probe"]: r for r in rows.to_dict("records")}


def test_the_lexical_judge_is_order_free_and_deterministic() -> None:
    rows = probe(LexicalJudge(), ["shuffle", "repeat", "pad"])
    for name in ("shuffle", "repeat"):
        assert rows[name]["flip_rate"] == 0.0 and rows[name]["score_shift"] == 0.0
        assert (rows[name]["flip_rate_ci_low"], rows[name]["flip_rate_ci_high"]) == (0.0, 0.0)
    assert rows["pad"]["score_shift"] >= 0.0  # recall can only grow with more text
    assert rows["shuffle"]["n_answers"] == len(ARMS) and rows["shuffle"]["n_nuggets"] == 4 + 3 + 3 + 2 + 4 + 4


def test_an_order_bound_judge_flips_where_the_first_nugget_moves() -> None:
    rows = probe(Positional(), ["shuffle"])
    flips = 0
    for arm in ARMS:
        nuggets = list(GOLD[arm.instance_id].nuggets)
        order = shuffled(nuggets, 3, arm.key)
        assert [n.id for n in order] != [n.id for n in nuggets] and sorted(order, key=lambda n: n.id) == nuggets
        flips += 2 if order[0].id != nuggets[0].id else 0  # the old first and the new first swap labels
    assert rows["shuffle"]["flip_rate"] == pytest.approx(flips / rows["shuffle"]["n_nuggets"])
    assert rows["shuffle"]["score_shift"] == pytest.approx(0.0, abs=30)  # weights equal within an instance


def test_padding_is_of_the_answers_language_and_length() -> None:
    answers = {a.key: a.answer for a in ARMS}
    for arm in ARMS:
        pad = padding(arm.key, answers, GOLD[arm.instance_id], 1.0, seed=3)
        assert 0 < len(pad) <= len(arm.answer) and is_cjk(pad) == is_cjk(arm.answer)
        assert arm.answer not in pad
    en = padding(ARMS[1].key, answers, GOLD["b"], 1.0, seed=3)  # b's nuggets share tokens with no a-answer but one
    assert not set(content_tokens(en)) & {"beta"}
    rows = probe(LengthBound(), ["pad"])
    padded = {
        a.key: len(a.answer)
        + (0 if is_cjk(a.answer) else 2)
        + len(padding(a.key, answers, GOLD[a.instance_id], 1.0, 3))
        for a in ARMS
    }
    flips = sum(len(GOLD[a.instance_id].nuggets) for a in ARMS if len(a.answer) < 100 <= padded[a.key])
    assert flips > 0
    assert rows["pad"]["flip_rate"] == pytest.approx(flips / rows["pad"]["n_nuggets"])


def test_a_drifting_judge_flips_every_label_on_repeat() -> None:
    rows = probe(Drifting(), ["repeat"])
    assert rows["repeat"]["flip_rate"] == 1.0 and rows["repeat"]["score_shift"] == pytest.approx(-50.0)


def test_the_repeat_probe_reaches_the_server_past_the_cache(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        server.handler = lambda body: json.dumps(
            {n: "full" for n in re.findall(r"^(n\d+): ", body["messages"][-1]["content"], re.MULTILINE)}
        )
        services = Services(cache_dir=tmp_path, settings={"llm": llm_settings(server, cache_dir=tmp_path)})
        judge = built(LLMJudge, services, model={"name": "m", "id": "openai/m"}, prompt="judge")
        arms = ARMS[:2]
        asyncio.run(probe_all(arms, GOLD, judge, Probing(["repeat"])))
        assert len(server.requests) == 2 * len(arms)  # the baseline and the repeat: two cache keys
        asyncio.run(probe_all(arms, GOLD, judge, Probing(["repeat"])))
        assert len(server.requests) == 2 * len(arms)  # a rerun is served from the cache


@pytest.mark.slow
def test_the_task_on_an_offline_sweep(tmp_path: Path, offline_jobs: dict[int, Path], cache_dir: Path) -> None:
    """``python run.py experiment=judge_probes probes.source=<dir>``: the lexical judge's shuffle flip rate is 0."""
    out = tmp_path / "probes"
    run_py(
        "experiment=judge_probes",
        f"probes.source={offline_jobs[1]}",
        f"hydra.run.dir={out}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"paths.cache_dir={cache_dir}",
        "bootstrap.n_resamples=300",
        cwd=tmp_path,
    )
    with (out / "judge_probes.csv").open(encoding="utf-8") as f:
        rows = {r["probe"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["shuffle", "pad", "repeat"]
    assert float(rows["shuffle"]["flip_rate"]) == 0.0 and float(rows["shuffle"]["score_shift"]) == 0.0
    assert float(rows["repeat"]["flip_rate"]) == 0.0
    assert float(rows["pad"]["score_shift"]) >= 0.0
    with (out / "judge_anchors.csv").open(encoding="utf-8") as f:
        anchors = {r["probe"]: float(r["score"]) for r in csv.DictReader(f)}
    assert anchors == {"empty": 0.0, "gold": 100.0}  # the lexical judge passes both anchors exactly
    metrics = json.loads((out / "robustness_metrics.json").read_text())
    assert metrics["flip_rate.shuffle"] == 0.0 and metrics["anchor_score.gold"] == 100.0
