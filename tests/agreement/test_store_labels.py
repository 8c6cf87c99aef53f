"""HUMAN assessments on the traces as labels: the names and values cts reads, and one line per wrong one."""

from __future__ import annotations

from cts.agreement.store import labels_from_assessments
from cts.data.human_labels import HumanLabel
from cts.tracking import StoredAssessment
from tests.agreement.fakes import sweep


def stored(name: str, value: object, run: str = "run-a", instance: str = "i001", who: str = "ann") -> StoredAssessment:
    return StoredAssessment(f"tr-{run}-{instance}", run, instance, name, value, who)


def test_nugget_and_orig_nugget_names_are_the_two_answers_of_a_trace() -> None:
    jobs, weights = sweep(5)
    found = [
        stored("nugget.n1", "Full"),
        stored("orig.nugget.n2", "none", who="标注员"),
        stored("orig.nugget.n2", "none", run="run-b", who="标注员"),  # the same orig answer on the other job's trace
        stored("nugget.n3", " partial ", run="run-b"),
    ]
    labels, problems = labels_from_assessments(found, jobs, weights)
    assert problems == []
    assert sorted(labels, key=lambda x: x.unit) == [
        HumanLabel("i001", "orig", "n2", "none", "标注员"),
        HumanLabel("i001", "rules_region-k1", "n3", "partial", "ann"),
        HumanLabel("i001", "rules_scope-k1", "n1", "full", "ann"),
    ]


def test_a_wrong_name_or_value_is_one_line_naming_trace_nugget_and_value() -> None:
    jobs, weights = sweep(5)
    found = [
        stored("nugget.n1", "fulll"),
        stored("nugget.n9", "full", instance="i002"),
        stored("label", "full", instance="i003"),
        stored("nugget.n2", 1.0, instance="i004"),
        stored("nugget.n2", "partial", instance="i000"),
    ]
    labels, problems = labels_from_assessments(found, jobs, weights)
    assert labels == [HumanLabel("i000", "rules_scope-k1", "n2", "partial", "ann")]
    assert problems == [
        "trace tr-run-a-i001 (instance i001, run run-a): nugget n1 = 'fulll': the value must be one of full, partial, none",
        "trace tr-run-a-i002 (instance i002, run run-a): nugget 'n9' = 'full': not a gold nugget of i002 (n1, n2, n3)",
        "trace tr-run-a-i003 (instance i003, run run-a): assessment 'label' = 'full': not a nugget label; "
        "name it nugget.<id> or orig.nugget.<id>",
        "trace tr-run-a-i004 (instance i004, run run-a): nugget n2 = 1.0: the value must be one of full, partial, none",
    ]


def test_two_labels_of_one_answer_by_one_annotator_conflict_and_cts_own_copies_are_skipped() -> None:
    jobs, weights = sweep(5)
    own = StoredAssessment(
        "tr-x", "run-a", "i001", "human_labels.ann", "n1=full", "ann", {"analysis": "human_agreement"}
    )
    found = [stored("orig.nugget.n1", "full"), stored("orig.nugget.n1", "none", run="run-b"), own]
    labels, problems = labels_from_assessments(found, jobs, weights)
    assert len(labels) == 1 and len(problems) == 1
    assert (
        "orig.nugget" not in problems[0]
        and "nugget n1 = 'none': ann labelled the same orig answer 'full'" in problems[0]
    )
