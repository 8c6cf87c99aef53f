"""A request the provider rejects (400/422) is a configuration failure, not a result (#17 item 3)."""

from __future__ import annotations

import json

import pytest

from cts.core.records import ErrorInfo, Record, read_records
from cts.protocol.job_files import INFRA_FILE, RECORDS_FILE, RETRIED_FILE
from cts.protocol.outcome import incomplete_message, read_outcome
from tests.llm_server import Reply
from tests.protocol.fakes import QUESTIONS, instances, job, llm_roles

REJECTION = json.dumps(
    {
        "error": {
            "message": "Unsupported value: 'temperature' does not support 0 with this model.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
    }
)


def test_a_rejected_request_stops_the_job_commits_nothing_and_a_resume_finishes(llm_server, tmp_path, services):
    llm_server.default = Reply(status=400, raw=REJECTION)
    records, stop = job(tmp_path, instances(6), llm_roles(llm_server, tmp_path, services), concurrency=2)
    assert stop == "request_rejected" and records == []
    assert not list(read_records(tmp_path / "job" / RECORDS_FILE))
    assert len(llm_server.requests) <= 2  # the calls in flight when the first answer came; then none
    outcome = read_outcome(tmp_path / "job", stop, 6, 0)
    assert outcome.incomplete
    message = incomplete_message(outcome, tmp_path / "job")
    assert "configuration failure, not a result" in message and "model m (openai/m) as clarifier" in message
    assert "parameter `temperature`" in message and "does not support 0" in message

    llm_server.default = Reply(QUESTIONS)  # the model file is fixed: the same job finishes
    records, stop = job(tmp_path, instances(6), llm_roles(llm_server, tmp_path, services), concurrency=2)
    assert stop == "done" and sorted(r.id for r in records) == [f"i{j}" for j in range(6)]
    assert (tmp_path / "job" / INFRA_FILE).read_text() == ""


def test_bad_request_records_of_older_versions_are_retried(llm_server, tmp_path, services):
    old = [
        Record(
            "i0",
            1,
            error=ErrorInfo(
                "clarify",
                "api_error",
                "bad_request: gpt at openai after 1 attempt(s): HTTP 400: Unsupported value: 'temperature'",
            ),
        ),
        Record("i1", 1, error=ErrorInfo("clarify", "invalid_output", "clarifier: invalid output")),
    ]
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / RECORDS_FILE).write_text("".join(r.to_json() + "\n" for r in old))
    llm_server.default = Reply(QUESTIONS)
    records, stop = job(tmp_path, instances(2), llm_roles(llm_server, tmp_path, services))
    assert stop == "done" and len(llm_server.requests) == 1  # only i0 runs again; i1 is a result
    assert [r.id for r in read_records(tmp_path / "job" / RETRIED_FILE)] == ["i0"]
    assert next(r for r in records if r.id == "i0").error is None


@pytest.mark.parametrize("status", [413, 422])
def test_413_and_422_are_rejections_too(llm_server, tmp_path, services, status):
    llm_server.default = Reply.error(status, "prompt is too long for the context")
    _, stop = job(tmp_path, instances(2), llm_roles(llm_server, tmp_path, services), concurrency=1)
    assert stop == "request_rejected"
