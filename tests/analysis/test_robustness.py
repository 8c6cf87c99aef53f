"""Judge robustness (Table 9) and backbone stability (Table 11) over frozen, synthetic runs."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf, open_dict

from cts.analysis import backbone_stability as bs
from cts.analysis import common
from cts.analysis import judge_robustness as jr
from cts.compose.services import Services
from cts.core.records import ArmResult, Record
from cts.core.types import UNKNOWN, Gold, Instance, Label, Nugget
from cts.data.jsonl import Dataset
from cts.report import jobs as report_jobs
from cts.roles.lexical import LexicalJudge
from cts.text.lexicon import BUILTIN_PLACES_EN, BUILTIN_PLACES_ZH
from tests.analysis.fakes import (
    CAREFUL,
    GOLD,
    HERE,
    INSTANCES,
    CountingJudge,
    Forbidden,
    YearOnlyUA,
    compose_task,
    stability_sweep,
    write_job,
)


def run_task(cfg: DictConfig, services: Services) -> Any:
    """Exactly what the app does with a task config."""
    from cts.compose.app import run_configured_task

    return run_configured_task(cfg, services)


def test_judge_robustness_table9_tau_kappa_and_no_protocol_calls(frozen_sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    cfg = compose_task("judge_robustness", out, frozen_sweep)
    with open_dict(cfg):
        for name, full, partial in (("lexical", 0.8, 0.4), ("lexical_strict", 0.9, 0.6)):
            cfg.robustness.judges[name] = {"_target_": f"{HERE}.CountingJudge", "full": full, "partial": partial}
    Forbidden.built, CountingJudge.calls = 0, []
    assert run_task(cfg, Services(cache_dir=tmp_path)) is None
    assert Forbidden.built == 0
    # 2 judges x (3 orig + 3 sys_a + 2 sys_b answers): sys_b's answer to c equals orig's, judged once
    assert len(CountingJudge.calls) == 2 * 8

    t9 = pd.read_csv(out / "judge_table9.csv").set_index("judge")
    assert list(t9.index) == ["recorded", "lexical", "lexical_strict"]
    assert t9.loc["lexical", ["orig", "sys_a-k1", "sys_b-k1"]].tolist() == pytest.approx([50.0, 250 / 3, 200 / 3])
    assert t9.loc["lexical_strict", ["orig", "sys_a-k1", "sys_b-k1"]].tolist() == pytest.approx([0.0, 50.0, 50.0])
    assert t9.loc["lexical", "ordering"] == "sys_a-k1 > sys_b-k1 > orig"
    assert t9.loc["lexical_strict", "ordering"] == "sys_a-k1 = sys_b-k1 > orig"
    assert t9["same_ordering"].tolist() == [True, True, False]
    assert t9.loc["lexical_strict", "kendall_tau"] == pytest.approx(2 / math.sqrt(6))  # tau-b with one tie
    assert t9.loc["recorded", "kendall_tau"] == pytest.approx(1.0)

    kappa = pd.read_csv(out / "judge_kappa.csv").set_index(["judge_a", "judge_b"])
    assert kappa.loc[("recorded", "lexical"), "kappa"] == pytest.approx(1.0)  # the runs used that judge
    strict = kappa.loc[("lexical", "lexical_strict")]
    # 8 distinct answers: (P,N)x3 orig, (F,P),(F,P),(P,P) sys_a, (F,F),(P,P) sys_b
    # p_o = 3/8; p_e = (3*1 + 5*4 + 0*3) / 64 = 23/64; kappa = (24 - 23) / (64 - 23)
    assert (strict["n_labels"], strict["agreement"]) == (8, 3 / 8)
    assert strict["kappa"] == pytest.approx(1 / 41)
    tau = pd.read_csv(out / "judge_tau.csv")
    assert len(tau) == 3
    for name in ("judge_table9", "judge_tau", "judge_kappa"):
        assert {(out / f"{name}.{ext}").is_file() for ext in ("md", "tex")} == {True}
    assert "| Judge | orig | sys_a-k1 | sys_b-k1 | Ordering |" in (out / "judge_table9.md").read_text()
    metrics = json.loads((out / "robustness_metrics.json").read_text())
    assert metrics["same_ordering.lexical_strict"] == 0.0


def test_failed_judge_call_is_excluded_not_zero(frozen_sweep: Path) -> None:
    class Flaky(LexicalJudge):
        async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]:
            if nuggets[0].id == "c1":
                raise RuntimeError("judge down")
            return await super().judge(answer, nuggets)

    jobs = report_jobs.load_jobs(frozen_sweep)
    scores, _ = asyncio.run(jr.rejudge(jobs, GOLD, {"flaky": Flaky()}, include_recorded=False))
    assert scores[scores["instance_id"] == "c"]["score"].isna().all()
    means = jr.condition_means(scores)
    assert means.loc["flaky", "sys_a-k1"] == 100.0  # a and b only


# ------------------------------------------------------------------ backbone stability


PLACES = bs.Concretiser.from_places(BUILTIN_PLACES_EN + BUILTIN_PLACES_ZH + ("Lisbon",))


@pytest.mark.parametrize(
    ("rewrite", "sources", "expected"),
    [
        ("best universities for AI, 2019", ["best universities for AI"], {"year": {"2019"}}),
        ("best universities for AI, 2019", ["best universities for AI", "2019"], {}),
        ("best universities for AI in Europe", ["best universities for AI"], {"region": {"Europe"}}),
        ("best universities for AI in Europe", ["best universities for AI", "Europe"], {}),
        ("best universities for AI at Stanford", ["best universities for AI"], {"entity": {"Stanford"}}),
        ("Best universities for AI", ["best universities for AI"], {}),  # capital at sentence start
        ("1755 Lisbon earthquake", ["earthquake"], {"year": {"1755"}, "region": {"Lisbon"}}),
        ("History of China", ["history"], {"region": {"China"}}),
        ("最好的大学，北京", ["最好的大学"], {"region": {"北京"}}),
        ("《三体》的读后感", ["读后感"], {"entity": {"三体"}}),
        ("最好的大学，2019年", ["最好的大学"], {"year": {"2019"}}),
    ],
)
def test_concretiser_finds_unsupported_terms(rewrite: str, sources: list[str], expected: dict[str, set[str]]) -> None:
    added = PLACES.added(rewrite, sources)
    assert {k: v for k, v in added.items() if v} == expected


def test_unknown_preservation_per_turn() -> None:
    item = bs.FrozenItem(INSTANCES[0], ("Which year?", "Which country?"), (("time",), ("region",)))
    out = bs.Replay((UNKNOWN, "Europe"), "tell me about a in Europe, 2019")
    added = PLACES.added(out.rewrite, [item.instance.blurred_query, "Europe"])
    assert added["year"] == {"2019"} and not added["region"]
    assert bs.preserved(item, out, added) == [False]  # the unknown year was concretised
    kept = bs.Replay((UNKNOWN, "Europe"), "tell me about a in Europe")
    assert bs.preserved(item, kept, PLACES.added(kept.rewrite, [item.instance.blurred_query, "Europe"])) == [True]


def test_rewrite_similarity_is_token_based_and_cjk_safe() -> None:
    assert bs.rewrite_similarity("best AI universities", "best AI universities") == 1.0
    assert bs.rewrite_similarity("最好的人工智能大学", "最好的人工智能大学，欧洲") > 0.7
    assert bs.rewrite_similarity("最好的大学", "天气预报") == 0.0


def backbone_task(tmp_path: Path, backbones: dict[str, Any]) -> tuple[Any, Path]:
    """The backbone_stability task over the two-item frozen sweep, with ``backbones``."""
    out = tmp_path / "out"
    out.mkdir()
    cfg = compose_task("backbone_stability", out, stability_sweep(tmp_path / "sweep"))
    with open_dict(cfg):
        cfg.robustness.backbones = OmegaConf.create(backbones)
    return cfg, out


def test_backbone_stability_table11_with_a_concretising_baseline(tmp_path: Path) -> None:
    cfg, out = backbone_task(
        tmp_path,
        {
            "careful": CAREFUL,
            "leaky": {
                "ua": {"_target_": f"{HERE}.SilentUA"},
                "rewriter": {"_target_": "cts.roles.baselines.ConcretisingRewriterBaseline", "year": "2024"},
            },
        },
    )
    Forbidden.built, YearOnlyUA.calls = 0, 0
    assert run_task(cfg, Services(cache_dir=tmp_path)) is None
    assert Forbidden.built == 0 and YearOnlyUA.calls == 2 * 4  # 2 backbones x 2 items x 2 frozen questions

    per = pd.read_csv(out / "backbone_protocol.csv").set_index("backbone")
    assert per.loc["careful", ["unknown_rate", "unknown_preservation", "unsupported_concretisation"]].tolist() == [
        0.75,
        1.0,
        0.0,
    ]
    assert per.loc["leaky", ["unknown_rate", "unknown_preservation", "unsupported_concretisation"]].tolist() == [
        1.0,
        0.0,
        1.0,
    ]
    pair = pd.read_csv(out / "backbone_table11.csv").iloc[0]
    assert pair["pair"] == "careful vs. leaky"
    assert pair["ua_agree"] == 0.75 and pair["unknown_preservation"] == 0.5
    assert 0.0 < pair["rewrite_sim"] < 1.0
    replays = [json.loads(x) for x in (out / "backbone_replays.jsonl").read_text().splitlines()]
    assert replays[0]["backbones"]["careful"]["rewrite"] == "tell me about a (1999)"
    assert replays[0]["backbones"]["leaky"]["rewrite"] == "tell me about a, 2024, United States"


def test_backbone_stability_offline_rule_roles_from_config(tmp_path: Path, services: Services) -> None:
    """The shipped preset (rule UA/Rewriter vs. the strict-bracket baseline) runs offline."""
    out = tmp_path / "out"
    out.mkdir()
    sweep = tmp_path / "sweep"
    recs = [
        Record(
            id="a",
            k=2,
            questions=(
                "Which time period of “tell me about a” are you asking about?",
                "Which region or place are you asking about?",
            ),
            question_types=(("time",), ("region",)),
            answers=("1999", UNKNOWN),
        )
    ]
    write_job(sweep, "rules_region", recs)
    cfg = compose_task("backbone_stability", out, sweep)
    assert set(cfg.robustness.backbones) == {"rules", "strict-bracket", "leaky-control"}
    assert run_task(cfg, services) is None
    per = pd.read_csv(out / "backbone_protocol.csv").set_index("backbone")
    assert per.loc["rules", "unsupported_concretisation"] == 0.0
    replays = json.loads((out / "backbone_replays.jsonl").read_text().splitlines()[0])
    assert replays["backbones"]["rules"]["answers"][0] == "1999"
    assert "1999" in replays["backbones"]["strict-bracket"]["rewrite"]


def test_budgets_select_source_jobs(frozen_sweep: Path) -> None:
    jobs = report_jobs.load_jobs(frozen_sweep)
    assert common.select_budgets(jobs, None) == jobs and common.select_budgets(jobs, [1]) == jobs
    with pytest.raises(ValueError, match="no source job has k"):
        common.select_budgets(jobs, [3])


def test_backbone_stability_excludes_an_item_a_backbone_failed(tmp_path: Path) -> None:
    cfg, out = backbone_task(
        tmp_path,
        {
            "careful": CAREFUL,
            "flaky": {**CAREFUL, "ua": {"_target_": f"{HERE}.FlakyUA"}},
        },
    )
    assert run_task(cfg, Services(cache_dir=tmp_path)) is None
    metrics = json.loads((out / "robustness_metrics.json").read_text())
    assert metrics["n_items"] == 1 and metrics["n_failed_items"] == 1  # both backbones compared on item a only
    per = pd.read_csv(out / "backbone_protocol.csv").set_index("backbone")
    assert per.loc["careful", "n_items"] == per.loc["flaky", "n_items"] == 1
