"""The scripted test server itself (plain urllib, no litellm)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from tests.llm_fakes import protocol_reply
from tests.llm_server import Reply, ScriptedServer


def post(server: ScriptedServer, body: Any) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(
        server.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


def content(text: str) -> str:
    return json.loads(text)["choices"][0]["message"]["content"]


def test_queue_then_handler_then_default(llm_server: ScriptedServer) -> None:
    assert llm_server.base_url.startswith("http://127.0.0.1:") and llm_server.base_url.endswith("/v1")
    llm_server.script("first", Reply.error(429, retry_after=2))
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    status, _, text = post(llm_server, body)
    assert (status, content(text)) == (200, "first")
    assert json.loads(text)["usage"]["prompt_tokens"] >= 1
    status, headers, _ = post(llm_server, body)
    assert status == 429 and headers["Retry-After"] == "2"
    assert content(post(llm_server, body)[2]) == "ok"
    llm_server.handler = lambda b: b["messages"][0]["content"].upper()
    assert content(post(llm_server, body)[2]) == "HELLO"
    assert [r.body for r in llm_server.requests] == [body] * 4
    assert llm_server.requests[0].time <= llm_server.requests[-1].time


def test_raw_body_and_tokens(llm_server: ScriptedServer) -> None:
    llm_server.script(Reply(raw="{not json"), Reply("x", tokens_in=7, tokens_out=3))
    assert post(llm_server, {})[2] == "{not json"
    assert json.loads(post(llm_server, {})[2])["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
    }


def test_reset(llm_server: ScriptedServer) -> None:
    llm_server.script("queued")
    post(llm_server, {})
    llm_server.script("left over")
    llm_server.reset()
    assert llm_server.requests == [] and content(post(llm_server, {})[2]) == "ok"


def test_protocol_reply_answers_each_prompt() -> None:
    def body(user: str) -> dict:
        return {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": user}]}

    assert json.loads(protocol_reply(body("Query: q\n\nNumber of questions: 3"))) == [
        "Which time period do you mean?",
        "Which specific entity or scope do you mean?",
        "By which definition or criterion?",
    ]
    assert protocol_reply(body("Intent query: x\n\nClarification question: Which year?")) == "unknown"
    assert (
        protocol_reply(body("Original query: 最好的大学\n\nClarification questions and answers:\nQ1: a\nA1: b"))
        == "最好的大学"
    )
    gold = json.loads(protocol_reply(body("Evidence snippets:\n[e1] T (s)\nFact one.\n\n[e2] U (s)\nFact two.")))
    assert [(n["id"], n["evidence_ids"]) for n in gold["nuggets"]] == [("n1", ["e1"]), ("n2", ["e2"])]
    labels = json.loads(
        protocol_reply(body("Candidate answer:\nOxford is first\n\nNuggets:\nn1: Oxford first\nn2: Paris"))
    )
    assert labels == {"n1": "full", "n2": "none"}
