"""The batch emulators (``tests/batch_emulators.py``) over real HTTP on 127.0.0.1.

A batched request's result must be the body the live route answers to the same request (so a
sweep scores the same batched or live); the lifecycle, validation, timing, expiry, injected
failures, cancel and a server restart behave as the providers document them.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.batch_emulators import AnthropicBatchEmulator, OpenAIBatchEmulator

OA_AUTH = {"Authorization": "Bearer sk-test"}
AN_AUTH = {"x-api-key": "k-test", "anthropic-version": "2023-06-01"}
STRUCTURED_BETA = {"anthropic-beta": "structured-outputs-2025-11-13"}
ASK = "Blurred query: Tell me about Mercury\nNumber of questions: {k}\n"
QUESTIONS_SCHEMA = {
    "type": "object",
    "properties": {"questions": {"type": "array", "items": {"type": "string"}}},
    "required": ["questions"],
    "additionalProperties": False,
}


def call(
    emulator: Any, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, str, bytes]:
    """One request on a fresh connection: (status, content type, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", int(emulator.url.rsplit(":", 1)[1]), timeout=10)
    try:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()


def ok(emulator: Any, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    status, _, data = call(emulator, method, path, body, headers)
    assert status == 200, data
    return json.loads(data)


def jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode().splitlines()]


def multipart(fields: dict[str, str | tuple[str, bytes]]) -> tuple[str, bytes]:
    boundary = uuid.uuid4().hex
    out = b""
    for name, value in fields.items():
        if isinstance(value, tuple):
            head = f'form-data; name="{name}"; filename="{value[0]}"\r\nContent-Type: application/jsonl'
            payload = value[1]
        else:
            head, payload = f'form-data; name="{name}"', value.encode()
        out += f"--{boundary}\r\nContent-Disposition: {head}\r\n\r\n".encode() + payload + b"\r\n"
    return f"multipart/form-data; boundary={boundary}", out + f"--{boundary}--\r\n".encode()


def chat(k: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": "gpt-5-mini",
        "messages": [{"role": "system", "content": "Ask."}, {"role": "user", "content": ASK.format(k=k)}],
        **extra,
    }


def line(custom_id: str, body: dict[str, Any], url: str = "/v1/chat/completions") -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def upload(emulator: OpenAIBatchEmulator, rows: list[Any]) -> dict[str, Any]:
    data = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows).encode()
    kind, body = multipart({"purpose": "batch", "file": ("batch.jsonl", data)})
    return ok(emulator, "POST", "/v1/files", body, {**OA_AUTH, "Content-Type": kind})


def openai_batch(emulator: OpenAIBatchEmulator, rows: list[Any], **extra: Any) -> dict[str, Any]:
    file = upload(emulator, rows)
    create = {"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h", **extra}
    return ok(emulator, "POST", "/v1/batches", create, OA_AUTH)


def poll(emulator: Any, path: str, headers: dict[str, str], done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        batch = ok(emulator, "GET", path, headers=headers)
        if done(batch) or time.monotonic() > deadline:
            return batch
        time.sleep(0.02)


def oa_ended(batch: dict[str, Any]) -> bool:
    return batch["status"] in ("completed", "failed", "expired", "cancelled")


def file_lines(emulator: OpenAIBatchEmulator, file_id: str | None) -> dict[str, dict[str, Any]]:
    if file_id is None:
        return {}
    status, kind, data = call(emulator, "GET", f"/v1/files/{file_id}/content", headers=OA_AUTH)
    assert status == 200 and not kind.startswith("application/json")
    return {row["custom_id"]: row for row in jsonl(data)}


@pytest.fixture
def openai() -> Iterator[OpenAIBatchEmulator]:
    with OpenAIBatchEmulator(delay_s=0.05) as emulator:
        yield emulator


@pytest.fixture
def anthropic() -> Iterator[AnthropicBatchEmulator]:
    with AnthropicBatchEmulator(delay_s=0.05) as emulator:
        yield emulator


def test_openai_batch_lines_are_answered_as_the_live_route_answers(openai: OpenAIBatchEmulator) -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "qs", "strict": True, "schema": QUESTIONS_SCHEMA}}
    bodies = {
        "plain": chat(2, max_completion_tokens=2000),
        "schema": chat(3, response_format=schema),
        "capped": chat(4, max_completion_tokens=400),  # reasoning + reply beyond the cap: finish_reason length
        "refused": chat(1, temperature=0.2),  # gpt-5 refuses a temperature other than 1
    }
    batch = openai_batch(openai, [line(cid, body) for cid, body in bodies.items()], metadata={"run": "t"})
    assert (batch["status"], batch["object"], batch["metadata"]) == ("validating", "batch", {"run": "t"})
    assert batch["id"].startswith("batch_") and batch["request_counts"] == {"total": 4, "completed": 0, "failed": 0}
    done = poll(openai, f"/v1/batches/{batch['id']}", OA_AUTH, oa_ended)
    assert done["status"] == "completed" and done["request_counts"] == {"total": 4, "completed": 3, "failed": 1}
    assert done["completed_at"] and done["in_progress_at"] and done["model"] == "gpt-5-mini"
    output, errors = file_lines(openai, done["output_file_id"]), file_lines(openai, done["error_file_id"])
    assert sorted(output) == ["capped", "plain", "schema"] and list(errors) == ["refused"]
    for cid, body in bodies.items():
        row = (output | errors)[cid]
        assert row["id"].startswith("batch_req_") and row["error"] is None
        status, _, live = call(openai, "POST", "/v1/chat/completions", body, OA_AUTH)
        assert row["response"]["status_code"] == status
        got, want = row["response"]["body"], json.loads(live)
        if status == 200:
            assert json.dumps(got["choices"]) == json.dumps(want["choices"])
            assert json.dumps(got["usage"]) == json.dumps(want["usage"])
        else:
            assert got == want
    assert output["capped"]["response"]["body"]["choices"][0]["finish_reason"] == "length"
    assert json.loads(output["schema"]["response"]["body"]["choices"][0]["message"]["content"])["questions"]
    assert done["usage"]["output_tokens"] == sum(
        r["response"]["body"]["usage"]["completion_tokens"] for r in output.values()
    )
    assert (openai.live_posts, openai.batched_lines) == (4, 4)
    assert openai.created_batches[0].custom_ids == tuple(bodies) and openai.created_batches[0].size == 4


def test_openai_files_are_objects_with_their_bytes(openai: OpenAIBatchEmulator) -> None:
    file = upload(openai, [line("a", chat(1))])
    assert file["object"] == "file" and file["purpose"] == "batch" and file["filename"] == "batch.jsonl"
    assert ok(openai, "GET", f"/v1/files/{file['id']}", headers=OA_AUTH) == file
    _, _, data = call(openai, "GET", f"/v1/files/{file['id']}/content", headers=OA_AUTH)
    assert len(data) == file["bytes"] and jsonl(data)[0]["custom_id"] == "a"
    assert call(openai, "GET", "/v1/files/file-nope", headers=OA_AUTH)[0] == 404
    assert call(openai, "POST", "/v1/batches", {"input_file_id": file["id"]})[0] == 401  # no key: as the live route


@pytest.mark.parametrize(
    ("rows", "code", "at"),
    [
        ([line("a", chat(1)), line("a", chat(2))], "duplicate_custom_id", 2),
        ([line("a", chat(1)), line("b", {**chat(2), "model": "gpt-4.1"})], "mismatched_model", 2),
        ([line("a", chat(1)), line("b", chat(2), url="/v1/embeddings")], "invalid_url", 2),
        (["{not json", line("b", chat(2))], "invalid_json_line", 1),
        ([{**line("a", chat(1)), "method": "GET"}], "invalid_method", 1),
    ],
)
def test_an_invalid_input_file_fails_the_batch_at_validation(
    openai: OpenAIBatchEmulator, rows: list[Any], code: str, at: int
) -> None:
    batch = openai_batch(openai, rows)  # the upload itself is accepted
    failed = ok(openai, "GET", f"/v1/batches/{batch['id']}", headers=OA_AUTH)
    assert failed["status"] == "failed" and failed["failed_at"] and failed["output_file_id"] is None
    assert [(e["code"], e["line"]) for e in failed["errors"]["data"]] == [(code, at)]
    assert openai.batched_lines == 0


def test_an_openai_batch_ends_at_its_nth_poll_running_its_lines_in_proportion() -> None:
    with OpenAIBatchEmulator(delay_s=None, polls_to_end=4) as emulator:
        batch = openai_batch(emulator, [line(f"r{i}", chat(i + 1)) for i in range(4)])
        seen = [ok(emulator, "GET", f"/v1/batches/{batch['id']}", headers=OA_AUTH) for _ in range(4)]
    assert [b["status"] for b in seen] == ["in_progress"] * 3 + ["completed"]
    assert [b["request_counts"]["completed"] for b in seen] == [1, 2, 3, 4]


def test_an_openai_batch_ends_after_its_delay() -> None:
    with OpenAIBatchEmulator(delay_s=0.3) as emulator:
        batch = openai_batch(emulator, [line("a", chat(1))])
        path = f"/v1/batches/{batch['id']}"
        assert ok(emulator, "GET", path, headers=OA_AUTH)["status"] == "in_progress"
        time.sleep(0.35)
        assert ok(emulator, "GET", path, headers=OA_AUTH)["status"] == "completed"


def test_an_expired_openai_batch_keeps_what_ran_and_reports_the_rest_expired() -> None:
    with OpenAIBatchEmulator(delay_s=0, expire=2) as emulator:
        batch = openai_batch(emulator, [line(f"r{i}", chat(1)) for i in range(4)])
        done = ok(emulator, "GET", f"/v1/batches/{batch['id']}", headers=OA_AUTH)
        output, errors = file_lines(emulator, done["output_file_id"]), file_lines(emulator, done["error_file_id"])
    assert done["status"] == "expired" and done["expired_at"] and done["completed_at"] is None
    assert sorted(output) == ["r0", "r1"] and sorted(errors) == ["r2", "r3"]
    assert errors["r2"]["response"] is None and errors["r2"]["error"]["code"] == "batch_expired"
    assert emulator.batched_lines == 2


def test_injected_line_failures_go_to_the_error_file_as_server_errors() -> None:
    with OpenAIBatchEmulator(delay_s=0, fail=lambda cid, body: cid == "b") as emulator:
        batch = openai_batch(emulator, [line(cid, chat(1)) for cid in "abc"])
        done = ok(emulator, "GET", f"/v1/batches/{batch['id']}", headers=OA_AUTH)
        errors = file_lines(emulator, done["error_file_id"])
    assert done["status"] == "completed" and done["request_counts"] == {"total": 3, "completed": 2, "failed": 1}
    assert list(errors) == ["b"] and errors["b"]["response"]["status_code"] == 500
    assert errors["b"]["response"]["body"]["error"]["type"] == "server_error"


def test_a_cancelled_openai_batch_keeps_the_lines_finished_before_the_cancel() -> None:
    with OpenAIBatchEmulator(delay_s=None, polls_to_end=4) as emulator:
        batch = openai_batch(emulator, [line(f"r{i}", chat(1)) for i in range(4)])
        path = f"/v1/batches/{batch['id']}"
        ok(emulator, "GET", path, headers=OA_AUTH), ok(emulator, "GET", path, headers=OA_AUTH)
        cancelling = ok(emulator, "POST", f"{path}/cancel", headers=OA_AUTH)
        cancelled = ok(emulator, "GET", path, headers=OA_AUTH)
        output, errors = (
            file_lines(emulator, cancelled["output_file_id"]),
            file_lines(emulator, cancelled["error_file_id"]),
        )
        again = call(emulator, "POST", f"{path}/cancel", headers=OA_AUTH)[0]
    assert (cancelling["status"], cancelling["cancelling_at"] is not None) == ("cancelling", True)
    assert cancelled["status"] == "cancelled" and cancelled["cancelled_at"]
    assert sorted(output) == ["r0", "r1"] and {e["error"]["code"] for e in errors.values()} == {"batch_cancelled"}
    assert emulator.cancelled == [batch["id"]] and again == 400


def test_openai_batches_list_newest_first_with_a_cursor(openai: OpenAIBatchEmulator) -> None:
    ids = [openai_batch(openai, [line("a", chat(1))])["id"] for _ in range(3)]
    first = ok(openai, "GET", "/v1/batches?limit=2", headers=OA_AUTH)
    assert [b["id"] for b in first["data"]] == ids[::-1][:2] and first["has_more"]
    assert (first["first_id"], first["last_id"]) == (ids[2], ids[1])
    rest = ok(openai, "GET", f"/v1/batches?limit=2&after={first['last_id']}", headers=OA_AUTH)
    assert [b["id"] for b in rest["data"]] == [ids[0]] and not rest["has_more"]


def messages(k: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4000,
        "system": "Ask.",
        "messages": [{"role": "user", "content": ASK.format(k=k)}],
        **extra,
    }


def anthropic_batch(emulator: AnthropicBatchEmulator, params: dict[str, dict[str, Any]], **headers: str) -> Any:
    requests = [{"custom_id": cid, "params": p} for cid, p in params.items()]
    return ok(emulator, "POST", "/v1/messages/batches", {"requests": requests}, {**AN_AUTH, **headers})


def results(emulator: AnthropicBatchEmulator, batch_id: str) -> dict[str, dict[str, Any]]:
    status, _, data = call(emulator, "GET", f"/v1/messages/batches/{batch_id}/results", headers=AN_AUTH)
    assert status == 200, data
    return {row["custom_id"]: row["result"] for row in jsonl(data)}


def test_anthropic_batch_results_are_what_the_live_route_answers(anthropic: AnthropicBatchEmulator) -> None:
    params = {
        "plain": messages(2),
        "thinking": messages(3, thinking={"type": "enabled", "budget_tokens": 1024}),
        "schema": messages(2, output_format={"type": "json_schema", "schema": QUESTIONS_SCHEMA}),
        "refused": messages(1, temperature=0.5, top_p=0.9),  # Sonnet 4.5 takes one sampler
    }
    batch = anthropic_batch(anthropic, params, **STRUCTURED_BETA)  # the create call's beta applies to its requests
    assert batch["type"] == "message_batch" and batch["processing_status"] == "in_progress"
    assert batch["id"].startswith("msgbatch_") and batch["results_url"] is None
    assert call(anthropic, "GET", f"/v1/messages/batches/{batch['id']}/results", headers=AN_AUTH)[0] == 400
    done = poll(anthropic, f"/v1/messages/batches/{batch['id']}", AN_AUTH, lambda b: b["processing_status"] == "ended")
    assert done["request_counts"] == {"processing": 0, "succeeded": 3, "errored": 1, "canceled": 0, "expired": 0}
    assert done["ended_at"].endswith("Z") and done["results_url"].endswith(
        f"/v1/messages/batches/{batch['id']}/results"
    )
    got = results(anthropic, batch["id"])
    for cid, body in params.items():
        status, _, live = call(anthropic, "POST", "/v1/messages", body, {**AN_AUTH, **STRUCTURED_BETA})
        want = json.loads(live)
        if status == 200:
            assert got[cid]["type"] == "succeeded"
            assert json.dumps(got[cid]["message"]["content"]) == json.dumps(want["content"])
            assert json.dumps(got[cid]["message"]["usage"]) == json.dumps(want["usage"])
            assert got[cid]["message"]["stop_reason"] == want["stop_reason"]
        else:
            assert got[cid]["type"] == "errored" and got[cid]["error"]["error"] == want["error"]
    assert got["thinking"]["message"]["content"][0]["type"] == "thinking"
    assert json.loads(got["schema"]["message"]["content"][0]["text"])["questions"]
    assert (anthropic.live_posts, anthropic.batched_lines) == (4, 4)


def test_without_the_beta_on_the_create_call_a_structured_request_errors(anthropic: AnthropicBatchEmulator) -> None:
    schema = messages(2, output_format={"type": "json_schema", "schema": QUESTIONS_SCHEMA})
    batch = anthropic_batch(anthropic, {"s": schema})
    poll(anthropic, f"/v1/messages/batches/{batch['id']}", AN_AUTH, lambda b: b["processing_status"] == "ended")
    result = results(anthropic, batch["id"])["s"]
    assert result["type"] == "errored" and "output_format" in result["error"]["error"]["message"]


@pytest.mark.parametrize(
    ("requests", "needle"),
    [
        ([{"custom_id": "has space", "params": messages(1)}], "custom_id: String should match pattern"),
        ([{"custom_id": "x" * 65, "params": messages(1)}], "custom_id: String should match pattern"),
        ([{"custom_id": "a", "params": messages(1)}, {"custom_id": "a", "params": messages(2)}], "unique"),
        ([], "at least 1 item"),
        ([{"custom_id": "a"}], "params: Field required"),
    ],
)
def test_an_invalid_message_batch_is_refused_at_creation(
    anthropic: AnthropicBatchEmulator, requests: list[Any], needle: str
) -> None:
    status, _, data = call(anthropic, "POST", "/v1/messages/batches", {"requests": requests}, AN_AUTH)
    assert status == 400 and needle in json.loads(data)["error"]["message"]
    assert json.loads(data)["error"]["type"] == "invalid_request_error" and not anthropic.created_batches


def test_message_batches_authenticate_as_the_live_route(anthropic: AnthropicBatchEmulator) -> None:
    body = {"requests": [{"custom_id": "a", "params": messages(1)}]}
    assert call(anthropic, "POST", "/v1/messages/batches", body, {"anthropic-version": "2023-06-01"})[0] == 401
    assert call(anthropic, "POST", "/v1/messages/batches", body, {"x-api-key": "k"})[0] == 400
    assert call(anthropic, "GET", "/v1/messages/batches/msgbatch_nope", headers=AN_AUTH)[0] == 404


def test_a_canceled_message_batch_keeps_what_succeeded_before_the_cancel() -> None:
    with AnthropicBatchEmulator(delay_s=None, polls_to_end=4) as emulator:
        batch = anthropic_batch(emulator, {f"r{i}": messages(1) for i in range(4)})
        path = f"/v1/messages/batches/{batch['id']}"
        counts = [ok(emulator, "GET", path, headers=AN_AUTH)["request_counts"]["succeeded"] for _ in range(2)]
        canceling = ok(emulator, "POST", f"{path}/cancel", headers=AN_AUTH)
        ended = ok(emulator, "GET", path, headers=AN_AUTH)
        got = results(emulator, batch["id"])
    assert counts == [1, 2] and canceling["processing_status"] == "canceling" and canceling["cancel_initiated_at"]
    assert ended["processing_status"] == "ended"
    assert ended["request_counts"] == {"processing": 0, "succeeded": 2, "errored": 0, "canceled": 2, "expired": 0}
    assert [got[f"r{i}"]["type"] for i in range(4)] == ["succeeded", "succeeded", "canceled", "canceled"]
    assert emulator.cancelled == [batch["id"]]


def test_expiry_and_injected_failures_in_a_message_batch() -> None:
    with AnthropicBatchEmulator(
        delay_s=0, expire=lambda cid: cid != "late", fail=lambda cid, params: cid == "broken"
    ) as emulator:
        batch = anthropic_batch(emulator, {cid: messages(1) for cid in ("fine", "broken", "late")})
        ended = ok(emulator, "GET", f"/v1/messages/batches/{batch['id']}", headers=AN_AUTH)
        got = results(emulator, batch["id"])
    assert ended["request_counts"] == {"processing": 0, "succeeded": 1, "errored": 1, "canceled": 0, "expired": 1}
    assert got["broken"]["error"]["error"]["type"] == "api_error" and got["late"] == {"type": "expired"}


def test_message_batches_list_newest_first(anthropic: AnthropicBatchEmulator) -> None:
    ids = [anthropic_batch(anthropic, {"a": messages(1)})["id"] for _ in range(3)]
    first = ok(anthropic, "GET", "/v1/messages/batches?limit=2", headers=AN_AUTH)
    assert [b["id"] for b in first["data"]] == ids[::-1][:2] and first["has_more"]
    rest = ok(anthropic, "GET", f"/v1/messages/batches?limit=2&after_id={first['last_id']}", headers=AN_AUTH)
    assert [b["id"] for b in rest["data"]] == [ids[0]] and not rest["has_more"]


def _openai_flow(emulator: Any) -> tuple[str, dict[str, str], Callable[[dict[str, Any]], bool]]:
    batch = openai_batch(emulator, [line("a", chat(1)), line("b", chat(2))])
    return f"/v1/batches/{batch['id']}", OA_AUTH, lambda b: b["status"] == "completed"


def _anthropic_flow(emulator: Any) -> tuple[str, dict[str, str], Callable[[dict[str, Any]], bool]]:
    batch = anthropic_batch(emulator, {"a": messages(1), "b": messages(2)})
    return f"/v1/messages/batches/{batch['id']}", AN_AUTH, lambda b: b["processing_status"] == "ended"


@pytest.mark.parametrize(
    ("kind", "flow"), [(OpenAIBatchEmulator, _openai_flow), (AnthropicBatchEmulator, _anthropic_flow)]
)
def test_a_batch_outlives_a_server_restart_on_the_same_port(kind: Any, flow: Any) -> None:
    with kind(delay_s=None, polls_to_end=2) as emulator:
        url, port = emulator.url, int(emulator.url.rsplit(":", 1)[1])
        path, headers, ended = flow(emulator)
        kept = http.client.HTTPConnection("127.0.0.1", port, timeout=5)  # a keep-alive connection
        kept.request("GET", path, headers=headers)
        assert not ended(json.loads(kept.getresponse().read()))  # poll 1 of 2
        emulator.down(0.3)
        with pytest.raises(ConnectionRefusedError):
            call(emulator, "GET", path, headers=headers)
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            kept.request("GET", path, headers=headers)
            kept.getresponse()
        time.sleep(0.5)
        assert emulator.url == url
        assert ended(ok(emulator, "GET", path, headers=headers))  # poll 2 of 2, after the restart
        emulator.restart()
        assert ended(ok(emulator, "GET", path, headers=headers))


def test_the_live_route_keeps_connections_alive(openai: OpenAIBatchEmulator) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", int(openai.url.rsplit(":", 1)[1]), timeout=5)
    for _ in range(3):
        conn.request("POST", "/v1/chat/completions", body=json.dumps(chat(1)), headers=OA_AUTH)
        assert conn.getresponse().read() and conn.sock is not None
    conn.close()
    assert openai.live_posts == 3


def test_litellm_runs_an_openai_batch_against_the_emulator(openai: OpenAIBatchEmulator) -> None:
    from cts.llm._lite import litellm_module

    litellm = litellm_module()
    route = {"custom_llm_provider": "openai", "api_base": openai.base_url, "api_key": "sk-test"}
    # Without this flag, litellm's success logging downloads the output and error files of a retrieved
    # completed batch itself (to price it), in a background task: extra GETs the caller did not make.
    QUIET = {"batch_ignore_default_logging": True}
    bodies = {"a": chat(1), "b": chat(2, max_completion_tokens=3000)}
    data = "".join(json.dumps(line(cid, body)) + "\n" for cid, body in bodies.items()).encode()

    async def run() -> tuple[Any, Any, bytes]:
        file = await litellm.acreate_file(file=("batch.jsonl", data), purpose="batch", **route)
        batch = await litellm.acreate_batch(
            completion_window="24h", endpoint="/v1/chat/completions", input_file_id=file.id, **route
        )
        while batch.status not in ("completed", "failed", "expired", "cancelled"):
            await asyncio.sleep(0.02)
            batch = await litellm.aretrieve_batch(batch_id=batch.id, litellm_metadata=QUIET, **route)
        content = await litellm.afile_content(file_id=batch.output_file_id, **route)
        return file, batch, content.content

    file, batch, content = asyncio.run(run())
    assert file.id.startswith("file-") and batch.status == "completed"
    assert batch.request_counts.completed == 2
    rows = {row["custom_id"]: row["response"]["body"] for row in jsonl(content)}
    for cid, body in bodies.items():
        live = ok(openai, "POST", "/v1/chat/completions", body, OA_AUTH)
        assert rows[cid]["choices"] == live["choices"] and rows[cid]["usage"] == live["usage"]
    uploaded = next(s for s in openai.requests if s.path == "/v1/files")
    assert uploaded.headers["authorization"] == "Bearer sk-test"
    assert [s.path for s in openai.requests if s.path.endswith("/content")] == [
        f"/v1/files/{batch.output_file_id}/content"
    ]
