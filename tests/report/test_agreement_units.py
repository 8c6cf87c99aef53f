"""Which judges and arms the agreement tables see: a panel's members are judges of their own."""

from __future__ import annotations

from cts.core.records import ArmResult, Record
from cts.data.human_labels import HumanLabel
from cts.report.agreement import agreement_of, arm_names, judge_labels, label_problems
from cts.report.jobs import Job, label_jobs


def panel_job() -> Job:
    members = {"ja": {"n1": "full", "n2": "none"}, "jb": {"n1": "partial", "n2": "none"}}
    arm = ArmResult("q", labels={"n1": "partial", "n2": "none"}, score=25.0, judge_members=members)
    orig = ArmResult("q", labels={"n1": "none", "n2": "none"}, score=0.0)
    record = Record("i1", 1, questions=("?",), answers=("x",), clarified=arm, orig=orig)
    return Job("rules_scope", 1, (record,), factors={"judge": "panel", "ua/persona": "terse"})


def test_panel_members_are_judges_and_arm_names_leave_the_judge_out() -> None:
    other = Job("rules_scope", 1, panel_job().records, factors={"judge": "panel", "ua/persona": "cooperative"})
    jobs = label_jobs([panel_job(), other])
    names = dict(zip([j.factors["ua/persona"] for j in jobs], arm_names(jobs)))
    assert names["terse"] == ("rules_scope[ua/persona=terse]-k1", "orig[ua/persona=terse]")
    found = judge_labels([panel_job()])
    assert set(found) == {"panel", "panel/ja", "panel/jb"}
    assert found["panel/ja"][("i1", "rules_scope-k1")] == {"n1": "full", "n2": "none"}
    assert ("i1", "orig") in found["panel"] and ("i1", "orig") not in found["panel/ja"]


def test_unknown_ids_are_named_and_the_majority_breaks_ties_down() -> None:
    jobs = [panel_job()]
    labels = [
        HumanLabel("i1", "rules_scope-k1", "n1", "full", "a", 1),
        HumanLabel("i1", "rules_scope-k1", "n1", "partial", "b", 2),
        HumanLabel("i1", "rules_scope-k1", "n9", "full", "a", 3),
    ]
    weights = {"i1": {"n1": 1, "n2": 1}}
    assert label_problems(labels, jobs, weights) == ["line 3: nugget: 'n9' is not a gold nugget of i1"]
    inp = agreement_of(jobs, labels[:2], weights)
    assert inp.majority[("i1", "rules_scope-k1")] == {"n1": "partial"}
    assert inp.score(("i1", "rules_scope-k1"), {"n1": "full", "n2": "partial"}) == 75.0
    assert inp.score(("i1", "rules_scope-k1"), {"n1": "full"}) is None  # n2 unlabelled: no human score
