"""The unscored rate per role and kind, and the closing line of a mostly unscored job."""

from __future__ import annotations

import math

from cts.core.records import ArmResult, ErrorInfo, Record
from cts.protocol.unscored import (
    infra_by_role,
    mostly_unscored_note,
    rejected_by_role,
    unscored_line,
    unscored_rates,
)


def arm(score: float | None, stage: str = "judge", kind: str = "invalid_output") -> ArmResult:
    return ArmResult("q", score=score, error=None if score is not None else ErrorInfo(stage, kind, "why"))  # type: ignore[arg-type]


def record(i: int, clarified: ArmResult | None, orig: ArmResult | None, error: ErrorInfo | None = None) -> Record:
    return Record(id=str(i), k=1, clarified=clarified, orig=orig, error=error)


RECORDS = [
    record(1, arm(50.0), arm(40.0)),
    record(2, None, arm(None, "judge", "truncated"), ErrorInfo("answer", "truncated", "ua: truncated")),
    record(3, arm(None, "judge", "invalid_output"), arm(None, "search", "api_error")),
]


def test_each_missing_score_counts_once_for_the_role_and_kind_that_lost_it() -> None:
    rates = unscored_rates(RECORDS)
    assert rates["unscored_rate"] == 4 / 6
    assert rates["unscored_rate_ua_truncated"] == 1 / 6  # the clarified arm of 2: the UA's reply was cut
    assert rates["unscored_rate_judge_truncated"] == 1 / 6 and rates["unscored_rate_judge_invalid_output"] == 1 / 6
    assert rates["unscored_rate_search_rejected"] == 1 / 6  # a 4xx the provider answered
    assert rates["unscored_rate_clarifier_invalid_output"] == 0.0
    assert sum(v for k, v in rates.items() if k != "unscored_rate") == rates["unscored_rate"]


def test_instances_a_rejected_request_stopped_count_as_rejected_for_its_role() -> None:
    failures = [{"id": None, "kind": "request_rejected", "role": "judge", "message": "HTTP 400 ..."}]
    assert rejected_by_role(failures, 2) == {"judge": 2} and rejected_by_role(failures, 0) == {}
    rates = unscored_rates(RECORDS[:1], {"judge": 2})
    assert rates["unscored_rate"] == 4 / 6 and rates["unscored_rate_judge_rejected"] == 4 / 6


def test_a_job_with_every_score_has_no_line_and_no_job_has_nan_but_an_empty_one() -> None:
    assert unscored_line(unscored_rates(RECORDS[:1])) is None and mostly_unscored_note(RECORDS[:1]) is None
    assert math.isnan(unscored_rates([])["unscored_rate"])


def test_more_than_half_unscored_says_so_with_the_top_reasons() -> None:
    note = mostly_unscored_note(RECORDS)
    assert note is not None and "MOSTLY UNSCORED: 67% of the 6 scores" in note
    assert note.count("17%") == 3  # the top three reasons (four tie here)
    line = unscored_line(unscored_rates(RECORDS))
    assert line is not None and line.startswith("unscored: 67% of the scores (")
    assert mostly_unscored_note(RECORDS[:1] + RECORDS[1:2]) is None  # 2 of 4: not more than half


def test_infrastructure_failures_are_named_so_never_rejected() -> None:
    failures = [
        {"id": "4", "stage": "answer", "kind": "infra", "message": "batch: gpt: no reply after 3 batch submission(s)"},
        {"id": "5", "stage": "judge", "kind": "infra", "message": "server_error: claude after 6 attempt(s): HTTP 500"},
        {"id": None, "kind": "request_rejected", "role": "rewriter", "message": "HTTP 400 ..."},
    ]
    # 3 instances missing: 2 failed on infrastructure, 1 the rejection stopped
    assert infra_by_role(failures) == {"ua": 1, "judge": 1} and rejected_by_role(failures, 3) == {"rewriter": 1}
    rates = unscored_rates(RECORDS[:1], rejected_by_role(failures, 3), infra_by_role(failures))
    assert rates["unscored_rate"] == 6 / 8 and rates["unscored_rate_ua_infra"] == 2 / 8
    assert rates["unscored_rate_judge_infra"] == 2 / 8 and rates["unscored_rate_rewriter_rejected"] == 2 / 8
    assert rates["unscored_rate_ua_rejected"] == 0.0 and rates["unscored_rate_judge_rejected"] == 0.0
    line = unscored_line(rates)
    assert line is not None and "ua infrastructure failure 25%" in line and "ua rejected" not in line


def test_an_older_version_s_record_of_a_failed_batch_line_counts_as_infra() -> None:
    lost = ErrorInfo(
        "judge", "api_error", "batch: anthropic/claude: no reply after 3 batch submission(s), last: HTTP 500"
    )
    rates = unscored_rates([record(1, arm(None, "judge", "api_error"), ArmResult("q", error=lost))])
    assert rates["unscored_rate_judge_infra"] == 1 / 2 and rates["unscored_rate_judge_rejected"] == 1 / 2
