import asyncio
import json

from cts.core.records import read_records
from cts.core.types import Instance, SpendLimitReached, UnscoredError
from cts.protocol.pipeline import Roles, run_instances
from cts.protocol.settings import InstanceSettings, JobSettings
from cts.roles.lexical import LexicalJudge
from cts.roles.rules import NoClarifier, RuleClarifier, RuleRewriter, RuleUserAnswerer
from tests.helpers import TableSearch, Typer, built, gold_for, mercury


def roles(services, search, clarifier=None, judge=None):
    return Roles(
        clarifier=clarifier or RuleClarifier(order=["scope", "time", "region"]),
        ua=built(RuleUserAnswerer, services),
        rewriter=RuleRewriter(),
        search=search,
        judge=judge or LexicalJudge(),
        qtyper=Typer(),
    )


def job(tmp_path, instances, gold, rs, k=1, **kw):
    return asyncio.run(
        run_instances(instances, gold, rs, InstanceSettings(k), JobSettings(tmp_path, progress=False, **kw))
    )


def test_one_instance_end_to_end(services, tmp_path):
    inst, gold, table = mercury()
    records, stop = job(tmp_path, [inst], {"m1": gold}, roles(services, TableSearch(table)))
    (r,) = records
    assert stop == "done"
    assert r.questions and r.answers == ("planet",) and r.rewritten_query == "Tell me about Mercury, planet"
    assert (
        r.score == 100.0 and r.orig_score == 12.5
    )  # "Mercury has no moons": half its tokens -> partial (1 of 4 weight)
    assert r.question_types[0] == ("scope",)
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["clarified"]["labels"] == {"n1": "full", "n2": "full"}
    traces = [json.loads(x) for x in (tmp_path / "traces.jsonl").read_text().splitlines()]
    assert {t["arm"] for t in traces} == {"orig", "clarified", "instance"}


def test_orig_arm_reuses_the_search_when_the_query_is_unchanged(services, tmp_path):
    inst, gold, table = mercury()
    search = TableSearch(table)
    (r,), _ = job(tmp_path, [inst], {"m1": gold}, roles(services, search, clarifier=NoClarifier()))
    assert search.calls == ["Tell me about Mercury"]
    assert r.clarified == r.orig and r.questions == () and r.rewritten_query == inst.blurred_query


def test_rerun_skips_finished_instances(services, tmp_path):
    inst, gold, table = mercury()
    search = TableSearch(table)
    job(tmp_path, [inst], {"m1": gold}, roles(services, search))
    n_calls = len(search.calls)
    records, _ = job(tmp_path, [inst], {"m1": gold}, roles(services, search))
    assert len(search.calls) == n_calls and len(records) == 1
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 1


def test_records_of_earlier_versions_with_the_arm_key_system_load_and_resume(services, tmp_path):
    inst, gold, table = mercury()
    search = TableSearch(table)
    (new,), _ = job(tmp_path, [inst], {"m1": gold}, roles(services, search))
    path = tmp_path / "records.jsonl"
    line = json.loads(path.read_text())
    old = {("system" if key == "clarified" else key): value for key, value in line.items()}
    assert "clarified" not in old and old["system"]["score"] == 100.0
    path.write_text(json.dumps(old) + "\n")  # as written before the clarified arm was renamed

    (loaded,) = read_records(path)
    assert loaded == new and loaded.clarified is not None and loaded.score == 100.0
    assert "clarified" in json.loads(loaded.to_json()) and "system" not in json.loads(loaded.to_json())
    n_calls = len(search.calls)
    records, stop = job(tmp_path, [inst], {"m1": gold}, roles(services, search))
    assert stop == "done" and len(search.calls) == n_calls  # the old record counts as finished
    assert records == [new] and path.read_text().splitlines() == [json.dumps(old)]


def test_a_failing_instance_is_recorded_and_the_job_goes_on(services, tmp_path):
    inst, gold, table = mercury()
    other = Instance("m2", "Tell me about Venus", "Tell me about Venus, the planet")
    search = TableSearch(table, fail_on=["Tell me about Venus, planet"])
    records, stop = job(
        tmp_path, [inst, other], {"m1": gold, "m2": gold_for("m2", ("Venus", 1))}, roles(services, search)
    )
    by_id = {r.id: r for r in records}
    assert stop == "done" and by_id["m1"].score == 100.0
    bad = by_id["m2"]
    assert bad.score is None and bad.error.stage == "search" and bad.error.kind == "exception"
    assert "backend down" in bad.error.message and bad.orig_score is not None


class InvalidJudge:
    async def judge(self, answer, nuggets):
        raise UnscoredError("judge returned 1 label for 2 nuggets")


def test_unscored_is_not_zero(services, tmp_path):
    inst, gold, table = mercury()
    (r,), _ = job(tmp_path, [inst], {"m1": gold}, roles(services, TableSearch(table), judge=InvalidJudge()))
    assert r.score is None and r.orig_score is None
    assert r.error.kind == "invalid_output" and r.error.stage == "judge"


def test_a_failed_judge_keeps_the_answer_and_end_reason_in_records(services, tmp_path):
    inst, gold, table = mercury()
    job(tmp_path, [inst], {"m1": gold}, roles(services, TableSearch(table), judge=InvalidJudge()))
    (r,) = read_records(tmp_path / "records.jsonl")
    for arm in (r.clarified, r.orig):
        assert arm.score is None and arm.error.stage == "judge"
        assert arm.answer == table[arm.query] and arm.answer and arm.end_reason == "answer"


class BudgetClarifier:
    def __init__(self, allowed: int) -> None:
        self.allowed = allowed

    async def ask(self, blurred_query, k):
        if self.allowed <= 0:
            raise SpendLimitReached("max_usd reached")
        self.allowed -= 1
        return ["Which one?"]


def test_the_spend_limit_stops_cleanly_and_resumes(services, tmp_path):
    insts = [Instance(f"i{n}", f"query {n}", f"query {n} intent") for n in range(5)]
    gold = {i.id: gold_for(i.id, ("query", 1)) for i in insts}
    records, stop = job(
        tmp_path, insts, gold, roles(services, TableSearch({}), clarifier=BudgetClarifier(2)), concurrency=1
    )
    assert stop == "spend_limit" and len(records) == 2
    assert [r.id for r in read_records(tmp_path / "records.jsonl")] == ["i0", "i1"]
    records, stop = job(tmp_path, insts, gold, roles(services, TableSearch({}), clarifier=BudgetClarifier(9)))
    assert stop == "done" and [r.id for r in records] == [i.id for i in insts]


def test_resume_fingerprint_ignores_operational_settings_only():
    from hydra import compose, initialize_config_dir

    from cts.compose.job_config import protocol_fingerprint
    from tests.conftest import REPO

    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        base = protocol_fingerprint(compose("config", overrides=["experiment=offline"]))
        same = [["limit=5"], ["concurrency=2"], ["services.llm.spend.max_usd=3"], ["services.llm.cache.mode=off"]]
        other = [["k=2"], ["clarifier=rules_region"], ["judge.full=0.9"], ["services.llm.api_base=http://x/v1"]]
        for o in same:
            assert protocol_fingerprint(compose("config", overrides=["experiment=offline", *o])) == base, o
        for o in other:
            assert protocol_fingerprint(compose("config", overrides=["experiment=offline", *o])) != base, o


class FailingTyper:
    async def classify(self, question):
        from cts.core.types import CallError

        raise CallError("timeout", "typer timed out")


class FailingUA:
    async def answer(self, fused_query, question):
        raise UnscoredError("UA gave 3 lines")


def test_a_failing_question_typer_falls_back_to_the_lexicon(services, tmp_path):
    inst, gold, table = mercury()
    rs = roles(services, TableSearch(table))
    rs = Roles(**{**rs.__dict__, "qtyper": FailingTyper()})
    (r,), stop = job(tmp_path, [inst], {"m1": gold}, rs)
    assert stop == "done" and r.score == 100.0 and r.question_types == (("scope",),)


def test_questions_are_kept_when_a_later_stage_fails(services, tmp_path):
    inst, gold, table = mercury()
    rs = Roles(**{**roles(services, TableSearch(table)).__dict__, "ua": FailingUA()})
    (r,), _ = job(tmp_path, [inst], {"m1": gold}, rs, k=2)
    assert len(r.questions) == 2 and len(r.question_types) == 2 and r.answers == ()
    assert r.error.stage == "answer" and r.score is None and r.orig_score is not None


def test_a_torn_last_line_does_not_swallow_the_next_record(services, tmp_path):
    inst, gold, table = mercury()
    other = Instance("m2", "Tell me about Venus", "Tell me about Venus, the planet")
    (tmp_path / "records.jsonl").write_text('{"id": "m0", "k": 1, "questi')  # killed mid-write
    job(
        tmp_path,
        [inst, other],
        {"m1": gold, "m2": gold_for("m2", ("Venus", 1))},
        roles(services, TableSearch(table)),
        models={"clarifier": "RuleClarifier"},
    )
    got = list(read_records(tmp_path / "records.jsonl"))
    assert sorted(r.id for r in got) == ["m1", "m2"] and got[0].models == {"clarifier": "RuleClarifier"}
