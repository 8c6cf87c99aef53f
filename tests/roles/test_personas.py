"""Simulated users (``ua/persona``): rule baselines, LLM prompts, the unknown coin, the fidelity audit.

The rule personas are checked on the hand-written instances (tests/handwritten.py), not the demo set.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from cts._util.prompts import load_prompt
from cts.compose.services import Services
from cts.core.records import Record
from cts.core.types import UNKNOWN
from cts.protocol.fidelity import leaks, ua_fidelity
from cts.roles.llm import LLMUserAnswerer
from cts.roles.personas import Persona
from cts.roles.rules import RuleUserAnswerer
from cts.text.lexicon import PlaceLexicon
from cts.text.tokens import content_tokens
from tests.handwritten import INSTANCES
from tests.helpers import built
from tests.llm_server import ScriptedServer, llm_settings
from tests.runs import run_py

PLACES = PlaceLexicon(("Berlin", "Rio de Janeiro"))
TIME_Q = "Which time period of “{}” are you asking about?"
REGION_Q = "Which region or place are you asking about for “{}”?"
SCOPE_Q = "Which “{}” do you mean: which sense, work or specific entity?"


def answer(persona: Persona | None, intent: str, question: str) -> str:
    return asyncio.run(RuleUserAnswerer(PLACES, persona).answer(intent, question))


def test_the_unknown_coin_is_fixed_per_pair_and_fair() -> None:
    p = Persona("unknown_prone", unknown_p=0.3, seed=4)
    pairs = [(f"intent {i}", f"question {i % 7}") for i in range(2000)]
    draws = [p.withholds(*x) for x in pairs]
    assert draws == [p.withholds(*x) for x in reversed(pairs)][::-1]  # order-free, the same every time
    assert sps.binomtest(sum(draws), len(draws), 0.3).pvalue > 0.001
    assert draws != [Persona("u", unknown_p=0.3, seed=5).withholds(*x) for x in pairs]
    assert not any(Persona("c").withholds(*x) for x in pairs[:50])
    assert all(Persona("a", unknown_p=1.0).withholds(*x) for x in pairs[:50])


def test_cooperative_is_the_protocols_ua_and_terse_keeps_one_word() -> None:
    cooperative, terse = Persona("cooperative"), Persona("terse", rule="terse", max_words=1)
    for inst in INSTANCES:
        for q in (TIME_Q, REGION_Q, SCOPE_Q):
            question = q.format(inst.blurred_query.rstrip("?"))
            plain = answer(None, inst.fused_query, question)
            assert answer(cooperative, inst.fused_query, question) == plain
            short = answer(terse, inst.fused_query, question)
            if plain == UNKNOWN:
                assert short == UNKNOWN
            elif any("\u4e00" <= ch <= "\u9fff" for ch in plain):
                assert short == plain.replace(" ", "")[:2]
            else:
                assert short == plain.split()[0]
    assert answer(cooperative, "Jaguar the British car maker in the 1960s", TIME_Q.format("Jaguar")) == "1960s"


def test_off_target_answers_a_facet_it_was_not_asked() -> None:
    off = Persona("off_target", rule="off_target")
    intent = "Average rent for a two-bedroom flat in Berlin in 2020"
    question = TIME_Q.format("Average rent for a two-bedroom flat")
    assert answer(None, intent, question) == "2020"
    assert answer(off, intent, question) == "Berlin"  # asked the time: gives the place
    assert answer(off, intent, REGION_Q.format("Average rent for a two-bedroom flat")) == "2020"
    assert answer(off, "Jaguar", TIME_Q.format("Jaguar")) == UNKNOWN  # no other facet stated


def test_vague_has_no_rule_baseline() -> None:
    with pytest.raises(ValueError, match="no rule baseline.*ua/persona=vague"):
        RuleUserAnswerer(PLACES, Persona("vague", prompt="ua_vague", rule=None))


@pytest.mark.parametrize("name", ["ua_terse", "ua_vague", "ua_off_target"])
def test_persona_prompts_take_what_prompt_b_takes(name: str) -> None:
    prompt = load_prompt(name)
    assert prompt.placeholders == load_prompt("ua").placeholders == {"fused_query", "question"}
    assert [m["role"] for m in prompt.messages(fused_query="x", question="y")] == ["system", "user"]


def test_llm_personas_send_their_prompt_and_skip_withheld_calls(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        server.handler = lambda body: "Berlin"
        services = Services(cache_dir=tmp_path, settings={"llm": llm_settings(server)})
        spec = {"name": "m", "id": "openai/m"}

        def ua(persona: Persona) -> LLMUserAnswerer:
            return built(LLMUserAnswerer, services, model=spec, prompt="ua", persona=persona)

        got = asyncio.run(ua(Persona("terse", prompt="ua_terse", rule="terse")).answer("rent in Berlin", "Where?"))
        assert got == "Berlin" and "terse user" in server.requests[0].body["messages"][0]["content"]
        assert asyncio.run(ua(Persona("u", unknown_p=1.0)).answer("rent in Berlin", "Where?")) == UNKNOWN
        assert len(server.requests) == 1  # the withheld answer cost no call


def test_the_audit_counts_leaks_length_and_unknowns() -> None:
    intent = "Jaguar the British car maker in the 1960s"
    records = [
        Record("a", 2, questions=("Which period?", "Which Jaguar?"), answers=("1960s", "the British car maker")),
        Record("b", 2, questions=("Which period?", "Which place?"), answers=("1970s in Coventry", UNKNOWN)),
    ]
    got = ua_fidelity(records, {"a": intent, "b": intent})
    pairs = [
        ("1960s", "Which period?"),
        ("the British car maker", "Which Jaguar?"),
        ("1970s in Coventry", "Which period?"),
    ]
    assert leaks("1970s in Coventry", intent, "Which period?") == {"1970s", "coventry"}
    lengths = [len(content_tokens(a)) for a, _ in pairs]
    assert got["ua_known_answers"] == 3 and got["ua_leak_rate"] == pytest.approx(1 / 3)
    assert got["ua_answer_tokens"] == pytest.approx(np.mean(lengths))
    assert got["ua_minimality"] == pytest.approx(
        np.mean([n / len(content_tokens(q)) for n, (_, q) in zip(lengths, pairs)])
    )


@pytest.mark.slow
def test_the_persona_sweep_gives_the_by_persona_table(tmp_path: Path, cache_dir: Path) -> None:
    """The README's persona sweep offline: every number of the table recomputed from the records."""
    from cts.core.records import read_records
    from cts.demo.loading import load_demo

    sweep = tmp_path / "sweep"
    run_py(
        "-m",
        "experiment=offline",
        "ua=rules",
        "ua/persona=cooperative,terse,unknown_prone",
        "limit=40",
        "bootstrap.n_resamples=500",
        f"hydra.sweep.dir={sweep}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"paths.cache_dir={cache_dir}",
        cwd=tmp_path,
    )
    rows = {r["persona"]: r for r in _csv(sweep / "report" / "personas.csv")}
    assert list(rows) == ["cooperative", "terse", "unknown_prone"]
    records = {p: sorted(read_records(sweep / f"ua_persona={p}" / "records.jsonl"), key=lambda r: r.id) for p in rows}
    services = Services(cache_dir=cache_dir, settings={"corpus_lang": "en-us"})
    intents = {
        i.id: i.fused_query for i in load_demo(services.corpus, services.index, cache_dir, n=200, seed=0).instances
    }
    coop = np.array([r.score for r in records["cooperative"]])
    for persona, row in rows.items():
        mine = records[persona]
        scores, origs = np.array([r.score for r in mine]), np.array([r.orig_score for r in mine])
        answers = [(a, q, intents[r.id]) for r in mine for q, a in zip(r.questions, r.answers)]
        known = [(a, q, i) for a, q, i in answers if a != UNKNOWN]
        assert float(row["n"]) == 40 and float(row["score"]) == pytest.approx(scores.mean())
        assert float(row["delta"]) == pytest.approx((scores - origs).mean())
        ci = sps.bootstrap(
            (scores - origs,), np.mean, n_resamples=500, method="percentile", rng=np.random.default_rng(0)
        )
        assert (float(row["delta_ci_low"]), float(row["delta_ci_high"])) == pytest.approx(
            (ci.confidence_interval.low, ci.confidence_interval.high)
        )
        assert float(row["ua_unknown_rate"]) == pytest.approx(1 - len(known) / len(answers))
        novel = [set(content_tokens(a)) - set(content_tokens(i)) - set(content_tokens(q)) for a, q, i in known]
        assert float(row["ua_leak_rate"]) == pytest.approx(np.mean([bool(x) for x in novel]))
        if persona != "cooperative":
            assert float(row["vs_cooperative"]) == pytest.approx((scores - coop).mean())
    assert float(rows["unknown_prone"]["ua_unknown_rate"]) > float(rows["cooperative"]["ua_unknown_rate"])
    assert float(rows["terse"]["ua_answer_tokens"]) <= float(rows["cooperative"]["ua_answer_tokens"])


def _csv(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_no_persona_keeps_the_protocol_fingerprint() -> None:
    from hydra import compose, initialize_config_dir

    from cts.compose.job_config import protocol_config

    conf = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        plain = protocol_config(compose("config", overrides=["experiment=offline"]))
        terse = protocol_config(compose("config", overrides=["experiment=offline", "ua/persona=terse"]))
    assert "persona" not in plain["ua"] and terse["ua"]["persona"]["name"] == "terse"
    assert json.dumps(plain["ua"]) == json.dumps({"_target_": "RuleUserAnswerer"})  # a component by its name
