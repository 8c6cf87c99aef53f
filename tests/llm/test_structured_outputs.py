"""Every LLM role's request on every provider's own route: the reply's schema in the provider's form.

Each role (the batch and sequential clarifier, UA, rewriter, judge, question typer, gate and
extractor) is built as a job builds it and calls the registry's model on its emulator
(``tests/provider_emulators.py``, which refuses what each provider documents it refuses and
shapes its replies to the schema, as constrained decoding does), through litellm's provider
route, or the plain ``openai`` transport for OpenAI-compatible endpoints. Where the model file
says ``structured_output: json_schema`` the body carries the role's schema (OpenAI's
``response_format``, Anthropic's ``output_format``, Gemini's ``responseJsonSchema``); ``json_object_schema``
sends llama-cpp-python's form; ``json_object`` sends JSON mode for the roles whose prompt asks for
JSON and nothing for the others; ``none`` sends nothing. The parsed result is the role's answer.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from cts.core.types import QA, Evidence, Nugget
from cts.llm import LLMRuntime, ModelSpec, audit_scope
from cts.llm._audit import CONTENT_KEYS
from cts.llm._rules import applied_params
from cts.roles import schemas
from cts.roles.gates import LLMGate
from cts.roles.llm import LLMClarifier, LLMExtractor, LLMJudge, LLMRewriter, LLMUserAnswerer, RoleSettings
from cts.roles.qtyper import LLMQuestionTyper
from tests.llm_fakes import protocol_reply
from tests.provider_emulators import (
    AnthropicEmulator,
    CompatibleEmulator,
    Emulator,
    GeminiEmulator,
    LlamaCppEmulator,
    OpenAIEmulator,
    QianfanEmulator,
    VLLMEmulator,
)

CONF = Path(__file__).resolve().parents[2] / "conf"
KEYS = {
    "OPENAI_API_KEY": "sk-emulated",
    "ANTHROPIC_API_KEY": "sk-ant-emulated",
    "GEMINI_API_KEY": "emulated",
    "QIANFAN_API_KEY": "bce-v3/emulated",
    "DEEPSEEK_API_KEY": "sk-emulated",
    "MOONSHOT_API_KEY": "sk-emulated",
    "DASHSCOPE_API_KEY": "sk-emulated",
}
NUGGETS = (Nugget("n1", "Mercury is the smallest planet", 3), Nugget("n2", "Mercury orbits closest to the Sun", 2))
EVIDENCE = (Evidence("e1", "local://1", "Mercury (planet)", "Mercury is the smallest planet of the Solar System."),)


def deterministic_model(body: Any) -> str:
    """``protocol_reply``, plus the sequential turn, the question typer and the gate."""
    system = next((str(m.get("content")) for m in body["messages"] if m.get("role") == "system"), "")
    if "ONE AT A TIME" in system:
        return '{"question": "Which year do you mean?"}'
    if "label the clarification questions" in system:
        return '["time"]'
    if "You decide whether a search query is underspecified" in system:
        return '{"ask": true, "confidence": 0.8}'
    return protocol_reply(body)


# role -> (build, call, check of the result, schema asked for, the prompt asks for JSON)
ROLES: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[Any], bool], dict[str, Any], bool]] = {
    "clarifier": (
        lambda chat: LLMClarifier(chat, "clarifier"),
        lambda role: role.ask("Tell me about Mercury", 2),
        lambda out: len(out) == 2 and all(q.endswith("?") for q in out),
        schemas.questions(2),
        True,
    ),
    "sequential": (
        lambda chat: LLMClarifier(chat, "clarifier", mode="sequential", stop_early=True),
        lambda role: role.next_question("Tell me about Mercury", [], 2),
        lambda out: out == "Which year do you mean?",
        schemas.turn(True),
        True,
    ),
    "ua": (
        lambda chat: LLMUserAnswerer(chat, "ua"),
        lambda role: role.answer("Mercury, the planet, as seen in 2020", "Which year do you mean?"),
        lambda out: out == "unknown",
        schemas.answer(),
        False,
    ),
    "rewriter": (
        lambda chat: LLMRewriter(chat, "rewriter"),
        lambda role: role.rewrite("Tell me about Mercury", [QA("Which year do you mean?", "2020")]),
        lambda out: out == "Tell me about Mercury",
        schemas.query(),
        False,
    ),
    "judge": (
        lambda chat: LLMJudge(chat, "judge"),
        lambda role: role.judge("Mercury is the smallest planet.", NUGGETS),
        lambda out: set(out) == {"n1", "n2"} and set(out.values()) <= {"full", "partial", "none"},
        schemas.labels(["n1", "n2"]),
        True,
    ),
    "qtyper": (
        lambda chat: LLMQuestionTyper(chat),
        lambda role: role.classify("Which year do you mean?"),
        lambda out: out == ("time",),
        schemas.question_types(),
        True,
    ),
    "gate": (
        lambda chat: LLMGate(chat, "gate"),
        lambda role: role.decide("Tell me about Mercury"),
        lambda out: out.ask is True and out.confidence == 0.8,
        schemas.decision(),
        True,
    ),
    "extractor": (
        lambda chat: LLMExtractor(chat, "extractor"),
        lambda role: role.extract("Mercury, the planet", "Mercury is the smallest planet.", EVIDENCE),
        lambda out: len(out.nuggets) == 1 and out.nuggets[0].evidence_ids == ("e1",),
        schemas.gold(["e1"]),
        True,
    ),
}
PROVIDERS: dict[str, tuple[Callable[..., Emulator], str]] = {
    # registry name -> (emulator, wire format)
    "gpt": (OpenAIEmulator, "openai"),
    "webdancer": (VLLMEmulator, "openai"),
    "smollm2_135m": (LlamaCppEmulator, "llama_cpp"),
    "ernie": (QianfanEmulator, "none"),
    "deepseek": (CompatibleEmulator, "json_object"),
    "kimi": (CompatibleEmulator, "json_object"),
    "qwen": (CompatibleEmulator, "json_object"),
    "claude": (AnthropicEmulator, "anthropic"),
    "gemini": (GeminiEmulator, "gemini"),
}
ROUTES = [
    (name, transport)
    for name in PROVIDERS
    for transport in ("openai", "litellm")
    if transport == "litellm" or name in ("gpt", "webdancer", "smollm2_135m", "ernie")
]


@functools.cache
def registry(name: str) -> ModelSpec:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return ModelSpec.coerce(compose("config", overrides=[f"clarifier={name}"]).clarifier.model)


SHARES_CALLS = pytest.mark.xdist_group("structured_outputs")
"""On one worker, which builds the module's ``calls`` once (each worker would build its own)."""


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], dict[str, Any]]]:
    """Per route: each role's result, the bodies its emulator got, refusals, violations and the job's audit."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for key, value in KEYS.items():
            monkeypatch.setenv(key, value)
        for name, transport in ROUTES:
            out[name, transport] = run_roles(name, transport, tmp_path_factory.mktemp(f"{name}-{transport}"))
    yield out


def run_roles(name: str, transport: str, cache_dir: Path) -> dict[str, Any]:
    factory, _ = PROVIDERS[name]
    with factory(handler=deterministic_model) as emulator:
        spec = ModelSpec.coerce({**registry(name).__dict__, "api_base": emulator.base_url})
        runtime = LLMRuntime.from_settings({"cache": {"mode": "off"}, "transport": transport}, cache_dir)
        results, bodies = {}, {}
        with audit_scope() as audit:
            for role, (build, call, _, _, _) in ROLES.items():
                before = len(emulator.requests)
                results[role] = asyncio.run(call(build(runtime.client(spec, role))))
                (bodies[role],) = [s for s in emulator.requests[before:] if s.method == "POST"]
        runtime.cache.close()
    return {
        "results": results,
        "seen": bodies,
        "refusals": emulator.refusals,
        "violations": emulator.violations,
        "audit": {role: entry.as_json() for role, entry in audit.items()},
    }


@SHARES_CALLS
@pytest.mark.parametrize(("name", "transport"), ROUTES, ids=[f"{n}-{t}" for n, t in ROUTES])
def test_every_role_is_answered_and_parsed_on_every_provider(calls: Any, name: str, transport: str) -> None:
    got = calls[name, transport]
    assert not got["refusals"] and not got["violations"], (got["refusals"], got["violations"])
    for role, (_, _, check, _, _) in ROLES.items():
        assert check(got["results"][role]), (role, got["results"][role])


@SHARES_CALLS
@pytest.mark.parametrize(("name", "transport"), ROUTES, ids=[f"{n}-{t}" for n, t in ROUTES])
def test_each_roles_schema_goes_in_the_providers_own_form(calls: Any, name: str, transport: str) -> None:
    wire = PROVIDERS[name][1]
    for role, (_, _, _, schema, asks_json) in ROLES.items():
        seen = calls[name, transport]["seen"][role]
        body = seen.body
        asked = "clarifier" if role == "sequential" else role
        if wire == "openai":  # OpenAI, vLLM: the role's request as it asks for it, exactly
            assert body["response_format"] == schemas.response_format(asked, schema), role
        elif wire == "llama_cpp":
            assert body["response_format"] == {"type": "json_object", "schema": schema}, role
        elif wire == "json_object":
            assert body.get("response_format") == ({"type": "json_object"} if asks_json else None), role
        elif wire == "none":
            assert "response_format" not in body, role
        elif wire == "anthropic":
            sent = body["output_format"]
            assert sent["type"] == "json_schema" and "tools" not in body and "response_format" not in body, body
            assert list(sent["schema"]["properties"]) == list(schema["properties"]), role
            assert "structured-outputs-2025-11-13" in seen.headers["anthropic-beta"]
        else:  # gemini
            config = body["generationConfig"]
            assert config["response_mime_type"] == "application/json", config
            assert config["response_json_schema"]["required"] == schema["required"], role
            assert "response_format" not in body and "responseSchema" not in config


def test_a_schema_over_a_json_mode_endpoint_becomes_json_mode_only_where_the_messages_say_json() -> None:
    rules = registry("deepseek").request
    asked = {"response_format": schemas.response_format("ua", schemas.answer()), "temperature": 0}
    says = [{"role": "user", "content": "Reply with the JSON object only."}]
    silent = [{"role": "user", "content": "Answer in a few words."}]
    applied = applied_params(rules, asked, 64, says)
    assert applied.params == {"temperature": 0, "max_tokens": 64, "response_format": {"type": "json_object"}}
    assert applied.changes == ("response_format json_schema -> json_object (request.structured_output: json_object)",)
    dropped = applied_params(rules, asked, 64, silent)
    assert "response_format" not in dropped.params and "needs the word JSON" in dropped.changes[0]
    none = applied_params(registry("ernie").request, asked, 64, says)
    assert "response_format" not in none.params and "structured_output: none" in none.changes[0]


def test_structured_false_or_a_configured_response_format_replaces_the_roles_schema() -> None:
    class Chat:
        role = "ua"

        def with_role(self, role: str) -> Any:
            return self

    off = LLMUserAnswerer(Chat(), "ua", settings=RoleSettings(structured=False))  # type: ignore[arg-type]
    assert "response_format" not in off.request_params(schemas.answer())
    mine = {"type": "json_object"}
    own = LLMUserAnswerer(Chat(), "ua", settings=RoleSettings(params={"response_format": mine}))  # type: ignore[arg-type]
    assert own.request_params(schemas.answer())["response_format"] == mine


@SHARES_CALLS
@pytest.mark.parametrize(
    ("name", "transport"), [("gpt", "litellm"), ("claude", "litellm"), ("gemini", "litellm"), ("ernie", "openai")]
)
def test_the_audit_keeps_each_roles_params_as_the_provider_received_them(calls: Any, name: str, transport: str) -> None:
    got = calls[name, transport]
    audit = got["audit"]
    assert set(audit) == {"clarifier", "ua", "rewriter", "judge", "qtyper", "gate", "extractor"}
    for role, entry in audit.items():  # the clarifier's first call is the batch one
        wire = {k: v for k, v in got["seen"][role].body.items() if k not in CONTENT_KEYS}
        assert entry["wire"] == json.loads(json.dumps(wire)), (role, entry["wire"], wire)  # what the emulator got
        assert entry["sent_requests"] >= 1 and entry["calls"] >= 1
    if name == "ernie":
        assert all(any("dropped (request.structured_output: none)" in c for c in e["changes"]) for e in audit.values())


@pytest.mark.slow
def test_a_job_logs_its_request_audit_and_warns_of_a_requested_param_not_applied(
    tmp_path, llm_server, cache_dir
) -> None:
    from cts import tracking
    from tests.runs import run_py

    llm_server.handler = protocol_reply
    db = f"sqlite:///{tmp_path}/mlflow.db"
    proc = run_py(
        "clarifier=gpt",
        "judge=claude",  # ua and rewriter: ernie (structured_output: none)
        "search=extractive",
        "limit=1",
        "+ua.params={response_format: {type: json_object}}",
        f"services.llm.api_base={llm_server.base_url}",
        f"services.llm.cache.path={tmp_path}/llm.sqlite",
        f"hydra.run.dir={tmp_path / 'job'}",
        f"tracking.uri={db}",
        f"paths.cache_dir={cache_dir}",
        cwd=tmp_path,
    )
    assert (
        "a requested parameter is not applied as asked: ua.model (ernie): response_format json_object dropped "
        "(request.structured_output: none) [set in ua.params.response_format]"
    ) in proc.stderr
    audit = json.loads((tmp_path / "job" / tracking.REQUEST_AUDIT_FILE).read_text())
    bodies = {b["messages"][0]["content"][:20]: b for b in llm_server.bodies()}
    assert set(audit) == {"clarifier", "ua", "rewriter", "judge"}
    clarifier = audit["clarifier"]
    assert clarifier["wire"]["response_format"] == schemas.response_format("clarifier", schemas.questions(1))
    assert clarifier["wire"] == {"model": "gpt-5.2", **clarifier["sent"]}  # the openai transport's body, messages apart
    assert clarifier["sent"]["max_completion_tokens"] == 512 + 4096 and clarifier["sent"]["reasoning_effort"] == "low"
    assert any(b.get("response_format") == clarifier["wire"]["response_format"] for b in bodies.values())
    assert "response_format" not in audit["ua"]["wire"] and audit["ua"]["requested"]["response_format"] == {
        "type": "json_object"
    }
    assert audit["ua"]["changes"] == ["response_format json_object dropped (request.structured_output: none)"]
    assert audit["judge"]["wire"]["response_format"]["json_schema"]["name"] == "cts_judge"
    runs = tracking.search_runs(db)
    job = runs[runs["tags.cts.kind"] == "job"].iloc[0]
    assert "response_format=json_schema" in job["tags.cts.request.clarifier"]
    assert job["tags.cts.request.ua"].endswith(
        "changed: response_format json_object dropped (request.structured_output: none)"
    )
    logged = tracking.download_artifact(db, job["run_id"], tracking.REQUEST_AUDIT_FILE, tmp_path / "got")
    assert json.loads(logged.read_text()) == audit


def test_the_completion_probe_sends_each_roles_schema_and_keys_on_it() -> None:
    from cts.compose.completion_probe import completion_probes

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        on = compose("config", overrides=["clarifier=gpt", "judge=gpt", "ua=gpt", "rewriter=gpt"])
        off = compose(
            "config", overrides=["clarifier=gpt", "judge=gpt", "ua=gpt", "rewriter=gpt", "+ua.structured=false"]
        )
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-emulated")
        monkeypatch.setenv("WEBDANCER_API_BASE", "http://127.0.0.1:9/v1")
        probes = {p.paths[0]: p for p in completion_probes([on]) if p.spec["name"] == "gpt"}
        without = {p.paths[0]: p for p in completion_probes([off]) if p.spec["name"] == "gpt"}
    assert probes["clarifier.model"].params["response_format"] == schemas.response_format(
        "clarifier", schemas.questions(1)
    )
    assert probes["judge.model"].params["response_format"]["json_schema"]["name"] == "cts_judge"
    assert len(probes) == 4  # one probe per distinct request: the schemas differ by role
    assert "response_format" not in without["ua.model"].params and without["ua.model"].key != probes["ua.model"].key


def test_the_schema_is_part_of_the_cache_key(llm_server, tmp_path: Path) -> None:
    from tests.llm_server import llm_settings

    llm_server.handler = protocol_reply
    runtime = LLMRuntime.from_settings(llm_settings(llm_server, tmp_path), tmp_path)
    spec = {"name": "m", "id": "openai/m", "request": {"structured_output": "json_schema"}}

    def ask(k: int, structured: bool = True) -> list[str]:
        return asyncio.run(
            LLMClarifier(
                runtime.client(spec, "clarifier"), "clarifier", settings=RoleSettings(structured=structured)
            ).ask("Tell me about Mercury", k)
        )

    ask(1), ask(1)  # the same request: one sent, one from the cache
    assert len(llm_server.requests) == 1
    ask(1, structured=False)  # the same messages without the schema: another request
    assert len(llm_server.requests) == 2 and "response_format" not in llm_server.bodies()[-1]
    ask(2)  # another k: another prompt and another schema
    assert len(llm_server.requests) == 3 and llm_server.bodies()[-1]["response_format"]["json_schema"]["schema"] == (
        schemas.questions(2)
    )
    runtime.cache.close()
