"""Shared by several test modules (moved out of test_robustness.py: no test module imports another)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from cts.core.records import ArmResult, Record
from cts.core.types import UNKNOWN, Gold, Instance, Label, Nugget
from cts.data.jsonl import Dataset
from cts.roles.lexical import LexicalJudge

CONF = str(Path(__file__).resolve().parents[2] / "conf")


HERE = __name__


# One 5-token nugget per instance: how many of its tokens an answer contains sets the
# lexical recall (4/5 = 0.8 is full at full=0.8 but partial at full=0.9, ...).
TOKENS = {
    "a": "alpha beta gamma delta epsilon",
    "b": "zeta theta iota kappa lambda",
    "c": "sigma omicron upsilon omega rho",
}


INSTANCES = tuple(Instance(i, f"tell me about {i}", f"tell me about {i} in 1999") for i in TOKENS)


GOLD = {i: Gold(i, (Nugget(f"{i}1", text, 1),)) for i, text in TOKENS.items()}


def make_dataset(services: Any = None) -> Dataset:
    """Dataset factory used through config (``_target_``)."""
    return Dataset("synthetic", INSTANCES, GOLD)


def answer_with(instance_id: str, n: int) -> str:
    return " ".join(TOKENS[instance_id].split()[:n])


class Forbidden:
    """Stands in for roles a frozen-run analysis must never build."""

    built: ClassVar[int] = 0

    def __init__(self, **_: Any) -> None:
        Forbidden.built += 1


class CountingJudge(LexicalJudge):
    """The lexical judge, counting its calls across instances."""

    calls: ClassVar[list[str]] = []

    async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]:
        CountingJudge.calls.append(answer)
        return await super().judge(answer, nuggets)


def job_records(k: int, n_tokens: dict[str, int], clarified: bool = True) -> list[Record]:
    """Records whose orig arm holds 2 nugget tokens and clarified arm ``n_tokens[id]``."""
    judge = LexicalJudge()
    out = []
    for i in TOKENS:
        orig_answer = answer_with(i, 2)
        labels = asyncio.run(judge.judge(orig_answer, GOLD[i].nuggets))
        orig = ArmResult(query=f"tell me about {i}", answer=orig_answer, labels=labels, score=50.0)
        arm = orig
        if clarified:
            answer = answer_with(i, n_tokens[i])
            arm = ArmResult(
                query="rewritten", answer=answer, labels=asyncio.run(judge.judge(answer, GOLD[i].nuggets)), score=1.0
            )
        out.append(
            Record(
                id=i,
                k=k,
                questions=("Which year?",) if clarified else (),
                question_types=(("time",),) if clarified else (),
                answers=("1999",) if clarified else (),
                clarified=arm,
                orig=orig,
            )
        )
    return out


def write_job(root: Path, clarifier: str, records: Sequence[Record]) -> None:
    job = root / f"clarifier={clarifier},k=1"
    job.mkdir(parents=True)
    (job / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    (job / "summary.json").write_text(json.dumps({"choices": {"clarifier": clarifier}, "k": 1}), encoding="utf-8")


@pytest.fixture
def frozen_sweep(tmp_path: Path) -> Path:
    sweep = tmp_path / "sweep"
    write_job(sweep, "none", job_records(1, {}, clarified=False))
    write_job(sweep, "sys_a", job_records(1, {"a": 4, "b": 4, "c": 3}))
    write_job(sweep, "sys_b", job_records(1, {"a": 5, "b": 3, "c": 2}))
    return sweep


def robustness_config(experiment: str, out: Path, source: Path, *overrides: str, db: str = "unused.db") -> DictConfig:
    """The real config of a robustness ``experiment`` over the jobs in ``source``, writing into ``out``."""
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(
            "config",
            overrides=[
                f"experiment={experiment}",
                f"robustness.source={source}",
                f"paths.output_dir={out}",
                f"tracking.uri=sqlite:///{out}/{db}",
                *overrides,
            ],
        )


def compose_task(experiment: str, out: Path, source: Path, *overrides: str) -> DictConfig:
    cfg = robustness_config(experiment, out, source, *overrides)
    with open_dict(cfg):
        cfg.dataset = {"_target_": f"{HERE}.make_dataset"}
        for group in ("clarifier", "search", "ua", "rewriter"):  # built => counted => test fails
            cfg[group] = {"_target_": f"{HERE}.Forbidden"}
    return cfg


class YearOnlyUA:
    """Knows the year of instance ``a`` only."""

    calls: ClassVar[int] = 0

    def __init__(self, services: Any = None) -> None:
        pass

    async def answer(self, fused_query: str, question: str) -> str:
        YearOnlyUA.calls += 1
        return "1999" if "year" in question and fused_query.startswith("tell me about a ") else UNKNOWN


class SilentUA(YearOnlyUA):
    async def answer(self, fused_query: str, question: str) -> str:
        YearOnlyUA.calls += 1
        return UNKNOWN


def stability_sweep(root: Path) -> Path:
    recs = [
        Record(
            id=i,
            k=2,
            questions=("Which year?", "Which country?"),
            question_types=(("time",), ("region",)),
            answers=(UNKNOWN, UNKNOWN),
        )
        for i in ("a", "b")
    ]
    write_job(root, "sys_a", recs)
    return root


CAREFUL = {
    "ua": {"_target_": f"{HERE}.YearOnlyUA"},
    "rewriter": {"_target_": "cts.roles.baselines.BracketRewriterBaseline"},
}


class FlakyUA(YearOnlyUA):
    """Fails for good on instance ``b`` (after the re-asks the LLM layer already made)."""

    async def answer(self, fused_query: str, question: str) -> str:
        from cts.core.types import UnscoredError

        if fused_query.startswith("tell me about b"):
            raise UnscoredError("UA gave two lines")
        return await super().answer(fused_query, question)
