"""The WebDancer-format ReAct agent, over real HTTP.

The agent and its visit summariser talk to the scripted OpenAI-compatible
server (``llm_server``); search (Serper API) and pages go to a fake web server
on 127.0.0.1 (``fake_http``), so every request can be counted and inspected.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from cts._util.prompts import load_prompt
from cts.compose.app import build_node
from cts.compose.services import Services
from cts.core.contracts import SearchBackend, SearchHit
from cts.core.records import search_call_error
from cts.core.types import CallError, RequestRejected
from cts.llm import Completion, ModelSpec
from cts.search.fetchers import HttpFetcher, LocalCorpusFetcher, RoutingFetcher
from cts.search.providers import HttpPolicy, LocalWikiProvider, SearxngProvider, SerperProvider
from cts.search.react import (
    DEFAULT_STOP,
    RESULT_SEP,
    TOOL_CALL_ERROR,
    ToolCall,
    approx_tokens,
    evidence_id,
    messages_tokens,
    parse_tool_call,
    render_hits,
    restore_think,
)
from cts.search.webdancer import WebDancerSearch
from tests.helpers import built
from tests.llm_server import Reply, llm_settings
from tests.search.fakes import ARTICLE, FakeHTTP

CONF = Path(__file__).resolve().parents[2] / "conf"
MODEL = ModelSpec(name="webdancer", id="openai/WebDancer-32B")
QUESTION = "Which city is the capital of France? 法国的首都是哪里？"
SUMMARY = json.dumps(
    {
        "rational": "The page names the capital.",
        "evidence": "Paris is the capital and largest city of France.",
        "summary": "The page states that Paris is the capital of France.",
    }
)
ANSWER = "<think>The page confirms it.</think>\n<answer>Paris is the capital of France.</answer>"


def tool_call(name: str, **arguments: Any) -> str:
    return f"<think>I will use {name}.</think>\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def script(server: Any, agent: list[Any], summary: Any = SUMMARY) -> None:
    """Agent turns (requests with a system message) are served in order; summariser requests get ``summary``."""
    queue = list(agent)

    def handler(body: dict) -> Any:
        if body["messages"][0]["role"] == "system":
            return queue.pop(0) if queue else "<answer>script exhausted</answer>"
        return summary

    server.handler = handler


def agent_bodies(server: Any) -> list[dict]:
    return [b for b in server.bodies() if b["messages"][0]["role"] == "system"]


def summary_bodies(server: Any) -> list[dict]:
    return [b for b in server.bodies() if b["messages"][0]["role"] != "system"]


@pytest.fixture
def web(fake_http: FakeHTTP, monkeypatch: pytest.MonkeyPatch) -> FakeHTTP:
    """Serper-compatible search endpoint and two pages on the fake web server."""
    monkeypatch.setenv("SERPER_API_KEY", "test-key")
    paris, lyon = fake_http.url + "/paris", fake_http.url + "/lyon"
    organic = [
        {"title": "Paris - Wikipedia", "link": paris, "snippet": "Paris is the capital of France."},
        {"title": "Lyon", "link": lyon, "snippet": "Lyon is a city in France."},
    ]
    fake_http.route("POST", "/search", (200, "application/json", json.dumps({"organic": organic})))
    fake_http.route("GET", "/paris", (200, "text/html; charset=utf-8", ARTICLE))
    return fake_http


def make_services(tmp_path: Path, server: Any, cache: bool = False, memo: dict | None = None) -> Services:
    settings = {"corpus_lang": "en-us", "llm": llm_settings(server, tmp_path if cache else None)}
    services = Services(cache_dir=tmp_path, settings=settings)
    for key, value in (memo or {}).items():  # share the session's corpus and index
        services.memo(key, lambda value=value: value)
    return services


def make_agent(services: Services, web: FakeHTTP, **kwargs: Any) -> WebDancerSearch:
    provider = SerperProvider(base_url=web.url + "/search", settings=HttpPolicy(backoff_s=0))
    return built(WebDancerSearch, services, model=MODEL, provider=provider, fetcher=HttpFetcher(timeout_s=5), **kwargs)


def search(agent: WebDancerSearch, query: str = QUESTION):
    return asyncio.run(agent.search(query))


def episode(web: FakeHTTP) -> list[str]:
    paris = web.url + "/paris"
    first = tool_call("search", query=["capital of France", "法国 首都"])
    # The server ignores the stop sequence and invents a tool response: it must be cut off.
    first += "\n<tool_response>\ninvented results\n</tool_response>"
    return [first, tool_call("visit", url=[paris], goal="Find the capital of France"), ANSWER]


# --- one full episode: search -> visit -> answer --------------------------------------------


def test_episode_message_formats(tmp_path, llm_server, web):
    script(llm_server, episode(web))
    agent = make_agent(make_services(tmp_path, llm_server), web)
    assert isinstance(agent, SearchBackend)
    result = search(agent)

    b0, b1, b2 = agent_bodies(llm_server)
    assert [m["role"] for m in b0["messages"]] == ["system", "user"]
    user = b0["messages"][1]["content"]
    assert user.startswith("A conversation between a User and an Assistant")
    assert '"name": "search"' in user and '"name": "visit"' in user and "<tools>" in user
    assert user.endswith(f"User: {QUESTION}")
    assert b0["stop"] == list(DEFAULT_STOP) and b0["temperature"] == 0.6 and b0["top_p"] == 0.95
    assert b0["model"] == "WebDancer-32B"

    assert [m["role"] for m in b1["messages"]] == ["system", "user", "assistant", "user"]
    call = tool_call("search", query=["capital of France", "法国 首都"])
    assert b1["messages"][2]["content"].endswith(call.split("</think>")[1].strip())
    response = b1["messages"][3]["content"]
    assert response.startswith("<tool_response>\n") and response.endswith("\n</tool_response>")
    assert "invented results" not in json.dumps(b1)
    blocks = response.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>").split(RESULT_SEP)
    assert blocks[0].startswith("A search for 'capital of France' found 2 results:\n\n## Web Results\n1. [Paris")
    assert f"1. [Paris - Wikipedia]({web.url}/paris)\nParis is the capital of France." in blocks[0]
    assert blocks[1].startswith("A search for '法国 首都' found 2 results:")

    visit = b2["messages"][-1]["content"]
    assert [m["role"] for m in b2["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert visit.startswith(f"<tool_response>\nThe useful information in {web.url}/paris for user goal")
    assert "Evidence in page: \nParis is the capital and largest city of France." in visit
    assert "Summary: \nThe page states that Paris is the capital of France." in visit

    (summ,) = summary_bodies(llm_server)
    assert [m["role"] for m in summ["messages"]] == ["user"]
    assert "## **User Goal**\nFind the capital of France" in summ["messages"][0]["content"]
    assert "on the river Seine" in summ["messages"][0]["content"]  # trafilatura's main text
    assert "Copyright footer" not in summ["messages"][0]["content"]
    assert summ["temperature"] == 0.7 and "stop" not in summ

    assert (result.answer, result.answer_rule, result.end_reason) == (
        "Paris is the capital of France.",
        "answer_tag",
        "answer",
    )


def test_episode_evidence_trace_and_summary(tmp_path, llm_server, web):
    script(llm_server, episode(web))
    result = search(make_agent(make_services(tmp_path, llm_server), web))
    paris, lyon = web.url + "/paris", web.url + "/lyon"
    v_id = evidence_id("V", paris, "find the capital of france")
    assert [e.id for e in result.evidence] == [evidence_id("S", paris), evidence_id("S", lyon), v_id]
    page = result.evidence[2]
    assert (page.source, page.snippet) == (paris, "Paris is the capital and largest city of France.")
    assert page.title  # from the HTML page
    assert [t["type"] for t in result.trace] == [
        "prompt",
        "llm",
        "tool_call",
        "tool_result",
        "llm",
        "tool_call",
        "tool_result",
        "llm",
        "end",
    ]
    assert result.trace[3]["evidence_ids"] == [evidence_id("S", paris), evidence_id("S", lyon)]
    assert result.trace[6]["pages"] == [{"url": paris, "evidence_id": v_id, "rule": "summary", "cached": False}]
    summary = dict(result.summary)
    assert {
        k: summary[k]
        for k in (
            "llm_calls",
            "summary_calls",
            "tool_calls",
            "searches",
            "visits",
            "tool_errors",
            "tool_cache_hits",
            "evidence",
        )
    } == {
        "llm_calls": 3,
        "summary_calls": 1,
        "tool_calls": 2,
        "searches": 2,
        "visits": 1,
        "tool_errors": 0,
        "tool_cache_hits": 0,
        "evidence": 3,
    }
    assert summary["tokens_in"] > 0 and summary["tokens_out"] > 0
    assert (summary["end_reason"], summary["answer_rule"]) == ("answer", "answer_tag")
    searches = [s for s in web.seen if s.path == "/search"]
    assert sorted(s.json()["q"] for s in searches) == ["capital of France", "法国 首都"]
    assert all(s.json()["num"] == 10 and s.headers["X-API-KEY"] == "test-key" for s in searches)
    json.dumps(list(result.trace))  # the trace is JSON-able (archived as JSONL)


# --- robustness ------------------------------------------------------------------------------


def test_malformed_tool_call_json_is_reported_and_the_agent_continues(tmp_path, llm_server, web):
    broken = "<think>t</think>\n<tool_call>\nsearch for the capital please\n</tool_call>"
    repairable = (
        '<think>again</think>\n<tool_call>\n{"name": "search", "arguments": {"query": ["capital"]}\n</tool_call>'
    )
    script(llm_server, [broken, repairable, ANSWER])
    result = search(make_agent(make_services(tmp_path, llm_server), web))
    _, b1, b2 = agent_bodies(llm_server)
    assert b1["messages"][-1]["content"] == f"<tool_response>\n{TOOL_CALL_ERROR}\n</tool_response>"
    assert "A search for 'capital' found 2 results" in b2["messages"][-1]["content"]  # repaired JSON ran
    assert result.summary["tool_errors"] == 1 and result.summary["searches"] == 1
    assert result.trace[2]["error"] == TOOL_CALL_ERROR and result.answer_rule == "answer_tag"


def test_unknown_tool_and_bad_arguments_are_answered_with_errors(tmp_path, llm_server, web):
    script(
        llm_server, [tool_call("browse", url="x"), tool_call("search", query=[]), tool_call("visit", url=["u"]), ANSWER]
    )
    result = search(make_agent(make_services(tmp_path, llm_server), web))
    replies = [b["messages"][-1]["content"] for b in agent_bodies(llm_server)[1:]]
    assert (
        replies[0] == "<tool_response>\nError: unknown tool 'browse'. Available tools: search, visit.\n</tool_response>"
    )
    assert "[search] Invalid request" in replies[1] and "[visit] Invalid request" in replies[2]
    assert result.summary["tool_errors"] == 3 and result.end_reason == "answer"
    assert not web.seen


def test_unclosed_answer_tag_ends_the_run(tmp_path, llm_server, web):
    script(llm_server, ["<think>I know this.</think>\n<answer>Paris, on the Seine"])
    result = search(make_agent(make_services(tmp_path, llm_server), web))
    assert (result.answer, result.answer_rule, result.end_reason) == ("Paris, on the Seine", "unclosed_tag", "answer")
    assert len(llm_server.requests) == 1


def test_lone_closing_tag_and_plain_text_end_the_run(tmp_path, llm_server, web):
    script(llm_server, ["<think>done</think>\nIt is Paris.</answer>"])
    result = search(make_agent(make_services(tmp_path, llm_server), web))
    assert (result.answer, result.answer_rule) == ("It is Paris.", "lone_close")
    llm_server.reset()
    script(llm_server, ["<think>done</think>\nParis."])
    result = search(make_agent(make_services(tmp_path, llm_server), web))
    assert (result.answer, result.answer_rule, result.end_reason) == ("Paris.", "no_tags", "answer")


@pytest.mark.xfail(
    not hasattr(Completion, "reasoning"),
    strict=True,
    reason="the LLM layer drops the <think> block litellm moves to reasoning_content",
)
def test_reasoning_stays_in_the_history(tmp_path, llm_server, web):
    script(llm_server, episode(web))
    search(make_agent(make_services(tmp_path, llm_server), web))
    history = agent_bodies(llm_server)[1]["messages"]
    assert history[2]["content"] == tool_call("search", query=["capital of France", "法国 首都"])


def test_missing_opening_think_is_restored(tmp_path, llm_server, web):
    qwq_call = 'I should search first.</think>\n<tool_call>\n{"name": "search", "arguments": {"query": ["paris"]}}\n</tool_call>'
    script(llm_server, [qwq_call, "It is settled.</think>\n<answer>Paris</answer>"])
    result = search(make_agent(make_services(tmp_path, llm_server), web))
    history = agent_bodies(llm_server)[1]["messages"]
    assert history[2]["content"].startswith("<think>\nI should search first.</think>")
    llm_turns = [t for t in result.trace if t["type"] == "llm"]
    assert [t["think_restored"] for t in llm_turns] == [True, True]
    assert (result.answer, result.answer_rule) == ("Paris", "answer_tag")


def test_call_limit_forces_a_final_answer(tmp_path, llm_server, web):
    search_turn = tool_call("search", query=["paris"])
    script(llm_server, [search_turn, search_turn, "<think>enough</think>\n<answer>Paris</answer>"])
    result = search(make_agent(make_services(tmp_path, llm_server), web, max_llm_calls=2))
    bodies = agent_bodies(llm_server)
    assert len(bodies) == 3
    last = bodies[2]["messages"][-1]["content"]
    assert last.startswith("<tool_response>\nA search for 'paris'")  # the unread result is kept
    assert last.endswith("<answer>your answer</answer>")
    assert "You have now reached the maximum number of tool calls you can make." in last
    assert (result.answer, result.end_reason, result.summary["llm_calls"]) == ("Paris", "call_limit", 3)
    assert [t["type"] for t in result.trace][-3:] == ["final_prompt", "llm", "end"]


def test_call_limit_without_forced_answer(tmp_path, llm_server, web):
    script(llm_server, [tool_call("search", query=["paris"])] * 2)
    result = search(make_agent(make_services(tmp_path, llm_server), web, max_llm_calls=2, force_final_answer=False))
    assert len(agent_bodies(llm_server)) == 2
    assert (result.end_reason, result.answer_rule, result.answer) == ("call_limit", "empty", "")


def test_context_limit_replaces_the_last_tool_response_with_the_final_request(tmp_path, llm_server, web):
    services = make_services(tmp_path, llm_server)
    limit = messages_tokens(make_agent(services, web).initial_messages(QUESTION)) + 60
    script(llm_server, [tool_call("search", query=["paris"]), "<think>ok</think><answer>Paris</answer>"])
    result = search(make_agent(services, web, max_context_tokens=limit))
    _, final = agent_bodies(llm_server)
    assert final["messages"][-1]["role"] == "user"
    assert final["messages"][-1]["content"].startswith("You have now reached the maximum context length")
    assert "<tool_response>" not in final["messages"][-1]["content"]
    assert (result.end_reason, result.answer) == ("context_limit", "Paris")
    assert result.evidence  # the search still produced citable evidence


def test_model_error_mid_run_ends_with_error(tmp_path, llm_server, web):
    script(llm_server, [tool_call("search", query=["paris"]), Reply.error(409, "conflict")])
    result = search(make_agent(make_services(tmp_path, llm_server), web))
    assert result.end_reason == "error" and result.trace[-2]["type"] == "error"
    assert result.evidence and result.summary["end_reason"] == "error"
    # The failure is typed on the result: nobody has to scan the trace for it.
    assert result.failure is not None and result.failure.message == result.trace[-2]["message"]
    assert search_call_error(result).kind == result.failure.kind


def test_model_error_before_any_output_raises(tmp_path, llm_server, web):
    script(llm_server, [Reply.error(409, "conflict")])
    with pytest.raises(CallError):
        search(make_agent(make_services(tmp_path, llm_server), web))


def test_rejected_request_mid_run_stops_the_job(tmp_path, llm_server, web):
    script(llm_server, [tool_call("search", query=["paris"]), Reply.error(400, "bad request")])
    with pytest.raises(RequestRejected, match="as search"):
        search(make_agent(make_services(tmp_path, llm_server), web))


def test_cut_turns_are_shown_as_cut_then_end_truncated(tmp_path, llm_server, web):
    cut = Reply("<think>and so on and so on", finish_reason="length")
    script(llm_server, [cut, cut, cut])
    result = search(make_agent(make_services(tmp_path, llm_server), web, max_output_tokens=16, max_truncated_turns=2))
    assert result.end_reason == "truncated"
    bodies = agent_bodies(llm_server)
    assert len(bodies) == 3 and all(b["max_tokens"] == 16 for b in bodies)
    assert "cut off at the length limit (16 tokens)" in bodies[1]["messages"][-1]["content"]
    assert [t["finish_reason"] for t in result.trace if t["type"] == "llm"] == ["length"] * 3


def test_one_cut_turn_then_an_answer(tmp_path, llm_server, web):
    script(llm_server, [Reply("<think>long", finish_reason="length"), ANSWER])
    result = search(make_agent(make_services(tmp_path, llm_server), web, max_output_tokens=16))
    assert result.end_reason == "answer" and result.answer


def test_visit_failures_fall_back(tmp_path, llm_server, web):
    paris, missing = web.url + "/paris", web.url + "/missing"
    script(llm_server, [tool_call("visit", url=[missing, paris], goal="capital"), ANSWER], summary="no json here")
    result = search(make_agent(make_services(tmp_path, llm_server), web, fallback_page_chars=200))
    response = agent_bodies(llm_server)[1]["messages"][-1]["content"]
    failed, fallback = response.removeprefix("<tool_response>\n").split(RESULT_SEP)
    assert failed.startswith(f"[visit] Failed to read page {missing}: ")
    assert "No summary could be extracted; the page begins:\n" in fallback and "river Seine" in fallback
    (page,) = result.evidence
    assert page.id == evidence_id("V", paris, "capital") and len(page.snippet) <= 200
    assert [p["rule"] for p in result.trace[3]["pages"]] == ["error", "fallback"]
    assert result.summary["tool_errors"] == 1 and result.summary["visits"] == 2


def test_search_provider_failure_is_a_tool_error(tmp_path, llm_server, web):
    web.route("POST", "/search", (500, "text/plain", "down"))
    script(llm_server, [tool_call("search", query=["paris"]), ANSWER])
    result = search(make_agent(make_services(tmp_path, llm_server), web))
    assert "[search] Search for 'paris' failed:" in agent_bodies(llm_server)[1]["messages"][-1]["content"]
    assert result.summary["tool_errors"] == 1 and result.end_reason == "answer"


def test_missing_search_key_aborts_the_run(tmp_path, llm_server, web, monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY")
    script(llm_server, [tool_call("search", query=["paris"]), ANSWER])
    with pytest.raises(CallError) as err:
        search(make_agent(make_services(tmp_path, llm_server), web))
    assert err.value.kind == "config"


# --- caches ----------------------------------------------------------------------------------


def test_rerun_with_warm_caches_sends_no_request(tmp_path, llm_server, web):
    script(llm_server, episode(web))
    first = search(make_agent(make_services(tmp_path, llm_server, cache=True), web))
    llm_requests, web_requests = len(llm_server.requests), len(web.seen)
    assert (llm_requests, web_requests) == (4, 3)

    services = make_services(tmp_path, llm_server, cache=True)  # a new job on the same cache dir
    second = search(make_agent(services, web))
    assert len(llm_server.requests) == llm_requests and len(web.seen) == web_requests
    assert (second.answer, second.evidence, second.end_reason) == (first.answer, first.evidence, first.end_reason)
    assert without_cache_flags(second.trace) == without_cache_flags(first.trace)
    assert second.summary["tool_cache_hits"] == 3  # two queries and one page
    assert services.memo("tool_cache", lambda: None).counters() == {"tool_cache_hits": 3, "tool_cache_misses": 0}


def test_a_search_or_page_that_failed_transiently_is_not_cached_and_a_rerun_fetches_it_once(tmp_path, llm_server, web):
    paris = web.url + "/paris"
    turns = [tool_call("search", query=["capital of France"]), tool_call("visit", url=[paris], goal="首都"), ANSWER]

    def handler(body: dict) -> Any:  # the agent's n-th turn, whatever the tool results were
        if body["messages"][0]["role"] != "system":
            return SUMMARY
        return turns[min(sum(m["role"] == "assistant" for m in body["messages"]), len(turns) - 1)]

    llm_server.handler = handler
    web.route("POST", "/search", (500, "text/plain", "down"))
    web.route("GET", "/paris", (503, "text/html", "busy"))
    first = search(make_agent(make_services(tmp_path, llm_server, cache=True), web))
    assert first.summary["tool_errors"] == 2 and first.summary["tool_cache_hits"] == 0
    n_seen = len(web.seen)
    web.route("POST", "/search", (200, "application/json", json.dumps({"organic": []})))
    web.route("GET", "/paris", (200, "text/html; charset=utf-8", ARTICLE))
    second = search(make_agent(make_services(tmp_path, llm_server, cache=True), web))
    assert sorted(s.path for s in web.seen[n_seen:]) == ["/paris", "/search"]  # each failed call again, once
    assert second.summary["tool_errors"] == 0 and second.summary["tool_cache_hits"] == 0
    n_seen, n_llm = len(web.seen), len(llm_server.requests)
    third = search(make_agent(make_services(tmp_path, llm_server, cache=True), web))
    assert len(web.seen) == n_seen and len(llm_server.requests) == n_llm and third.answer == second.answer


def without_cache_flags(value: Any) -> Any:
    """The trace without what legitimately differs on a replay (cache flags, latency, cost, times)."""
    if isinstance(value, dict):
        return {
            k: without_cache_flags(v) for k, v in value.items() if k not in ("cached", "latency_s", "cost_usd", "t_ns")
        }
    if isinstance(value, (list, tuple)):
        return [without_cache_flags(v) for v in value]
    return value


def test_tool_cache_is_shared_across_query_spellings(tmp_path, llm_server, web):
    script(
        llm_server,
        [
            tool_call("search", query=["Capital of France"]),
            tool_call("search", query=["  capital   OF france"]),
            ANSWER,
        ],
    )
    result = search(make_agent(make_services(tmp_path, llm_server, cache=True), web))
    assert len([s for s in web.seen if s.path == "/search"]) == 1
    assert result.summary["tool_cache_hits"] == 1


# --- the offline stack: local_wiki + local corpus ---------------------------------------------


def test_offline_stack_searches_and_reads_the_local_corpus(tmp_path, llm_server, services):
    memo = {"corpus": services.corpus, "index": services.index}
    local = make_services(tmp_path, llm_server, memo=memo)
    top = services.index.search("Mercury planet closest to the Sun", 1)[0].doc
    script(
        llm_server,
        [
            tool_call("search", query=["Mercury planet closest to the Sun"]),
            tool_call("visit", url=[top.url], goal="orbit of Mercury"),
            ANSWER,
        ],
    )
    fetcher = RoutingFetcher({"local": LocalCorpusFetcher(local.corpus)})
    agent = built(WebDancerSearch, local, model=MODEL, provider=LocalWikiProvider(local.index), fetcher=fetcher)
    result = search(agent, "Which planet is closest to the Sun?")
    hits = agent_bodies(llm_server)[1]["messages"][-1]["content"]
    assert f"1. [{top.title}]({top.url})" in hits
    assert top.text[:200] in summary_bodies(llm_server)[0]["messages"][0]["content"]
    assert all(e.source.startswith("local://") for e in result.evidence)
    assert result.evidence[-1].id == evidence_id("V", top.url, "orbit of mercury")


# --- config ----------------------------------------------------------------------------------


def test_config_builds_the_agent_with_released_defaults(tmp_path):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(
            "config", overrides=["search=webdancer", "search/provider=searxng", f"paths.cache_dir={tmp_path}"]
        )
    agent = build_node(cfg.search, Services(cache_dir=tmp_path))
    assert isinstance(agent.provider, SearxngProvider)
    assert sorted(agent.fetcher.routes) == ["http", "https", "local"]
    assert agent.agent.spec.id == "openai/WebDancer-32B" and agent.summariser.spec.name == "webdancer"
    assert (agent.agent.role, agent.summariser.role) == ("search", "visit_summary")
    assert (
        agent.max_llm_calls,
        agent.max_context_tokens,
        agent.results_per_query,
        agent.max_queries_per_call,
        agent.max_page_chars,
    ) == (50, 31 * 1024 - 500, 10, 3, 150_000)
    assert agent.params == {"temperature": 0.6, "top_p": 0.95, "stop": list(DEFAULT_STOP)}
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        default = compose("config", overrides=["search=webdancer"])
    assert default.search.provider._target_.endswith("LocalWikiProvider")


# --- pure helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no call here", None),
        (
            '<tool_call>{"name": "search", "arguments": {"query": ["a"]}}</tool_call>',
            ToolCall("search", {"query": ["a"]}, '{"name": "search", "arguments": {"query": ["a"]}}'),
        ),
        (
            '<tool_call>\n{"name": "visit", "arguments": "{\\"url\\": [\\"u\\"], \\"goal\\": \\"g\\"}"}\n',
            ToolCall(
                "visit",
                {"url": ["u"], "goal": "g"},
                '{"name": "visit", "arguments": "{\\"url\\": [\\"u\\"], \\"goal\\": \\"g\\"}"}',
            ),
        ),
        ("<tool_call>[1, 2]</tool_call>", ToolCall("", {}, "[1, 2]", TOOL_CALL_ERROR)),
        (
            '<tool_call>{"name": "search", "arguments": 3}</tool_call>',
            ToolCall("search", {}, '{"name": "search", "arguments": 3}', TOOL_CALL_ERROR),
        ),
        ('<think>maybe <tool_call>{"name": "x"}</tool_call></think>no call after thinking', None),
    ],
)
def test_parse_tool_call(text, expected):
    assert parse_tool_call(text) == expected


def test_restore_think():
    assert restore_think("plan</think>act") == ("<think>\nplan</think>act", True)
    assert restore_think("<think>plan</think>act") == ("<think>plan</think>act", False)
    assert restore_think("no reasoning") == ("no reasoning", False)


def test_approx_tokens_counts_cjk_characters():
    assert approx_tokens("abcdefgh") == 2
    assert approx_tokens("北京是首都") == 5
    assert approx_tokens("") == 0


def test_render_hits_and_evidence_ids():
    hits = [SearchHit("T1", "http://a/1", "s1"), SearchHit("T2", "http://a/2", "")]
    text = render_hits("q", hits)
    assert text == "A search for 'q' found 2 results:\n\n## Web Results\n1. [T1](http://a/1)\ns1\n\n2. [T2](http://a/2)"
    assert render_hits("q", []).startswith("No results found for 'q'.")
    assert evidence_id("S", "http://a/1") == evidence_id("S", "http://a/1") != evidence_id("V", "http://a/1")
    assert evidence_id("S", "http://a/1").startswith("S-") and len(evidence_id("S", "x")) == 10


@pytest.mark.parametrize(
    ("name", "placeholders"),
    [
        ("webdancer_system", set()),
        ("webdancer_user", {"tools", "question"}),
        ("webdancer_final", {"limit"}),
        ("visit_summary", {"webpage_content", "goal"}),
    ],
)
def test_prompt_placeholders_match_the_code(name, placeholders):
    assert load_prompt(name).placeholders == placeholders
