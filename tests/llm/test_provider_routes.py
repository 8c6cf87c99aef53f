"""Every registry model's request, on its provider's own route, against an emulator of that provider.

The emulators (``tests/provider_emulators.py``) apply the rules each provider documents and
answer in its wire format; they are reached through litellm's provider routes
(``anthropic/``, ``gemini/``, ``deepseek/``, ``moonshot/``, ``dashscope/``, ``openai/``) with
the model's ``api_base`` pointing at them, and through the plain ``openai`` transport for
``openai/`` ids, never through ``services.llm.api_base`` (which rewrites every route to
``openai/``). The request is built as a call builds it: the model's params and a role's
output cap, through :func:`cts.llm._rules.request_params`.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from cts import tracking
from cts.compose.completion_probe import PROBE_TOKENS
from cts.core.contracts import Route
from cts.llm._rules import request_params, rule_violations
from cts.llm._spec import ModelSpec
from cts.llm._transport import HTTPStatusError, Sender
from tests.provider_emulators import (
    AnthropicEmulator,
    CompatibleEmulator,
    Emulator,
    GeminiEmulator,
    OpenAIEmulator,
    QianfanEmulator,
    VLLMEmulator,
)
from tests.runs import run_py

CONF = Path(__file__).resolve().parents[2] / "conf"
MESSAGES = [
    {"role": "system", "content": "You ask clarification questions."},
    {"role": "user", "content": "Blurred query: Tell me about Mercury\nNumber of questions: 2\n"},
]
ROLE_CAP = 64
PROVIDERS = {
    # registry name -> (emulator factory, wire format)
    "gpt": (OpenAIEmulator, "openai"),
    "ernie": (QianfanEmulator, "openai"),
    "webdancer": (VLLMEmulator, "openai"),
    "claude": (AnthropicEmulator, "anthropic"),
    "gemini": (GeminiEmulator, "gemini"),
    "deepseek": (lambda: CompatibleEmulator({"temperature": (0, 2), "top_p": (0, 1)}), "openai"),
    "kimi": (lambda: CompatibleEmulator({"temperature": (0, 1)}), "openai"),
    "qwen": (
        lambda: CompatibleEmulator(
            {"temperature": (0, 1.999), "top_p": (0.001, 1)},
            {"enable_thinking": "enable_thinking is not supported by this model"},
        ),
        "openai",
    ),
}
ROUTES = [
    (name, transport)
    for name in PROVIDERS
    for transport in ("openai", "litellm")
    if transport == "litellm" or name in ("gpt", "ernie", "webdancer")
]
KEYS = {
    "OPENAI_API_KEY": "sk-emulated",
    "ANTHROPIC_API_KEY": "sk-ant-emulated",
    "GEMINI_API_KEY": "emulated",
    "QIANFAN_API_KEY": "bce-v3/emulated",
    "DEEPSEEK_API_KEY": "sk-emulated",
    "MOONSHOT_API_KEY": "sk-emulated",
    "DASHSCOPE_API_KEY": "sk-emulated",
}


@functools.cache
def _registry(name: str) -> ModelSpec:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return ModelSpec.coerce(compose("config", overrides=[f"clarifier={name}"]).clarifier.model)


def registry_spec(name: str, **params: Any) -> ModelSpec:
    """The registry's ``conf/model/<name>.yaml`` as a spec (as composed), with ``params`` added to its own."""
    spec = _registry(name)
    return ModelSpec.coerce({**spec.__dict__, "params": {**spec.params, **params}, "request": spec.request})


def send(spec: ModelSpec, emulator: Emulator, transport: str, role_cap: int | None = ROLE_CAP) -> Any:
    """One request as a role's call makes it: the spec's params and the role's cap, on its route."""
    params = request_params(spec.request, spec.params, role_cap)
    coro = Sender(transport).send(
        Route(spec.id, emulator.base_url, "emulated-key", "emulator", 1),
        list(MESSAGES),
        10.0,
        (spec.input_cost_per_token, spec.output_cost_per_token),
        params,
    )
    return asyncio.run(coro)


def wire_cap(body: dict[str, Any], wire: str) -> dict[str, Any]:
    """The output-cap fields a request carries, as the provider sees them."""
    fields = ("max_tokens", "max_completion_tokens", "max_output_tokens")
    if wire == "gemini":
        body, fields = body.get("generationConfig") or {}, ("maxOutputTokens", "max_output_tokens")
    return {k: body[k] for k in fields if k in body}


def required_fields(seen: Any, wire: str) -> bool:
    """Whether the request has what the provider requires (beyond the cap)."""
    body, headers = seen.body, seen.headers
    if wire == "anthropic":
        return bool(body["messages"] and headers.get("x-api-key") and headers.get("anthropic-version"))
    if wire == "gemini":
        return bool(body["contents"] and headers.get("x-goog-api-key"))
    return bool(body["messages"] and body["model"] and seen.path.endswith("/chat/completions"))


@pytest.mark.parametrize(("name", "transport"), ROUTES, ids=[f"{n}-{t}" for n, t in ROUTES])
def test_the_registry_request_is_what_the_provider_accepts(name: str, transport: str) -> None:
    spec = registry_spec(name)
    factory, wire = PROVIDERS[name]
    with factory() as emulator:
        response = send(spec, emulator, transport)
    assert not emulator.refusals, emulator.refusals
    (seen,) = [s for s in emulator.requests if s.method == "POST"]
    cap = spec.request.cap_for(ROLE_CAP)
    assert set(wire_cap(seen.body, wire).values()) == {cap}, (seen.body, cap)  # one cap: the role's (+ allowance)
    if wire == "openai":
        assert list(wire_cap(seen.body, wire)) == [spec.request.cap_param]
    assert required_fields(seen, wire), seen
    sent = {k: v for k, v in seen.body.items() if k not in ("messages", "contents")}
    assert not rule_violations(name, spec.id, spec.request, sent)
    message = response.choices[0].message
    assert message.content.startswith('["Which')  # the reply was read back, thought summaries apart
    if wire == "gemini":
        assert "Weighing" in (getattr(message, "reasoning_content", None) or "")
    assert response.usage.completion_tokens > 0


def test_gpt_5_2_goes_with_a_reasoning_effort_and_max_completion_tokens_on_both_transports() -> None:
    spec = registry_spec("gpt")
    assert "temperature" not in spec.params and spec.params["reasoning_effort"] == "low"
    bodies = []
    for transport in ("openai", "litellm"):
        with OpenAIEmulator() as openai:
            response = send(spec, openai, transport)
        bodies.append(openai.bodies("/chat/completions")[0])
        details = response.usage.completion_tokens_details
        reasoning = details["reasoning_tokens"] if isinstance(details, dict) else details.reasoning_tokens
        assert reasoning > 0 and response.usage.completion_tokens > reasoning  # hidden tokens, counted as output
    for body in bodies:
        assert body["reasoning_effort"] == "low" and body["max_completion_tokens"] == ROLE_CAP + 4096
        assert not {"temperature", "top_p", "max_tokens"} & set(body)


@pytest.mark.parametrize("transport", ["openai", "litellm"])
def test_temperature_0_on_gpt_5_2_is_refused_by_the_provider_as_by_the_registry(transport: str) -> None:
    spec = registry_spec("gpt", temperature=0)
    problems = rule_violations(spec.name, spec.id, spec.request, spec.params)
    assert len(problems) == 1 and "`temperature`" in problems[0] and "gpt" in problems[0]
    with OpenAIEmulator() as openai, pytest.raises(Exception) as caught:
        send(spec, openai, transport)
    if transport == "litellm":
        # litellm's openai/ route knows the rule and refuses before sending (a 400-class error)
        assert type(caught.value).__name__ == "UnsupportedParamsError" and "temperature=0" in str(caught.value)
        assert getattr(caught.value, "status_code", None) == 400 and not openai.requests
        return
    ((status, error),) = openai.refusals
    assert status == 400 and error["error"]["code"] == "unsupported_value" and error["error"]["param"] == "temperature"
    assert error["error"]["message"] == (
        "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported."
    )
    assert isinstance(caught.value, HTTPStatusError) and caught.value.status_code == 400
    assert "does not support 0 with this model" in str(caught.value)


def test_effort_none_makes_temperature_acceptable_to_gpt_5_2_as_documented() -> None:
    spec = registry_spec("gpt", reasoning_effort="none", temperature=0)
    assert not rule_violations(spec.name, spec.id, spec.request, spec.params)
    with OpenAIEmulator() as openai:
        send(spec, openai, "openai")
    assert not openai.refusals and openai.bodies()[0]["temperature"] == 0


def test_max_tokens_is_refused_by_openai_reasoning_models_and_renamed_by_the_rules() -> None:
    spec = registry_spec("gpt", max_tokens=50)
    with OpenAIEmulator() as openai:
        with pytest.raises(HTTPStatusError):
            asyncio.run(
                Sender("openai").send(
                    Route(spec.id, openai.base_url, "k", "openai", 1), list(MESSAGES), 10.0, (0, 0), dict(spec.params)
                )
            )
        assert openai.refusals[0][1]["error"]["code"] == "unsupported_parameter"
        send(spec, openai, "openai")  # through request_params: the cap goes as max_completion_tokens
    assert openai.bodies()[-1]["max_completion_tokens"] == 50 and "max_tokens" not in openai.bodies()[-1]


@pytest.mark.parametrize(
    ("name", "extra", "needle"),
    [
        ("claude", {"top_p": 0.9}, "`temperature` and `top_p` cannot both be specified"),
        ("gemini", {"reasoning_effort": "none"}, "only works in thinking mode"),
        ("qwen", {"enable_thinking": True}, "enable_thinking"),
    ],
)
def test_what_a_provider_refuses_the_registry_refuses_at_start(name: str, extra: dict[str, Any], needle: str) -> None:
    spec = registry_spec(name, **extra)
    assert rule_violations(spec.name, spec.id, spec.request, spec.params)
    factory, _ = PROVIDERS[name]
    with factory() as emulator, pytest.raises(Exception, match=re.escape(needle)):
        send(spec, emulator, "litellm")
    assert [status for status, _ in emulator.refusals] == [400]


@pytest.mark.parametrize(
    ("name", "stop"),
    [
        ("gpt", lambda a: a["choices"][0]["finish_reason"] == "length"),
        ("claude", lambda a: a["stop_reason"] == "max_tokens"),
        ("gemini", lambda a: a["candidates"][0]["finishReason"] == "MAX_TOKENS"),
    ],
)
def test_a_reply_longer_than_its_cap_ends_with_the_providers_length_stop(name: str, stop: Any) -> None:
    spec = registry_spec(name)
    # no allowance: the hidden reasoning (96 tokens at gpt's low effort, 200 of Gemini's budget) eats the cap
    spec = ModelSpec.coerce({**spec.__dict__, "request": {**spec.request.__dict__, "reasoning_allowance": 0}})
    factory, _ = PROVIDERS[name]
    with factory() as emulator:
        response = send(spec, emulator, "litellm", role_cap=110 if name == "gpt" else 8 if name == "claude" else 205)
    (answer,) = emulator.answers
    assert stop(answer), answer
    assert response.choices[0].finish_reason == "length"
    full = '["Which time period do you mean?", "Which specific entity or scope do you mean?"]'
    assert len(response.choices[0].message.content or "") < len(full)


# --- the card's sweep, every model on its provider's emulator -----------------------------------------------


@contextmanager
def started_emulators(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Started emulators per registry model of the sweeps, and the provider keys set to dummies."""
    for key, value in KEYS.items():
        monkeypatch.setenv(key, value)
    with ExitStack() as stack:
        started = {
            name: stack.enter_context(PROVIDERS[name][0]())
            for name in ("gpt", "ernie", "claude", "gemini", "webdancer")
        }
        monkeypatch.setenv("WEBDANCER_API_BASE", started["webdancer"].base_url)
        yield started


@pytest.fixture()
def emulators(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    with started_emulators(monkeypatch) as started:
        yield started


def routed_conf(tmp_path: Path, emulators: dict[str, Any]) -> Path:
    """A copy of ``conf/`` whose model files are the registry's, each with its api_base at its emulator.

    It replaces the primary config dir (``--config-path``): a ``--config-dir`` comes after it in
    Hydra's search path, so it could add models but not replace the shipped ones.
    """
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    for name in ("gpt", "ernie", "claude", "gemini"):
        path = conf / "model" / f"{name}.yaml"
        routed, n = re.subn(r"(?m)^api_base: .*$", f"api_base: {emulators[name].base_url}", path.read_text("utf-8"))
        assert n == 1, name
        path.write_text(routed, encoding="utf-8")
    return conf


def run_card_sweep(tmp_path: Path, cache_dir: Path, conf: Path, *overrides: str) -> Any:
    db = f"sqlite:///{tmp_path}/mlflow.db"
    run_py(
        "--config-path",
        str(conf),
        "-m",
        *overrides,
        "limit=2",
        "sweep_report=false",  # read by no test here
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"tracking.uri={db}",
        f"paths.cache_dir={cache_dir}",
        f"services.llm.cache.path={tmp_path}/llm.sqlite",
        cwd=tmp_path,
    )
    runs = tracking.search_runs(db)
    return runs[runs["tags.cts.kind"] == "job"]


def assert_clean_sweep(jobs: Any, emulators: dict[str, Any], roles: tuple[str, ...]) -> None:
    assert len(jobs) == 9 and set(jobs["status"]) == {"FINISHED"} and (jobs["tags.stop_reason"] == "done").all()
    refused = {name: e.refusals for name, e in emulators.items() if e.refusals}
    assert not refused, refused  # no request was rejected, so no instance is unscored for it
    broken = {name: e.violations for name, e in emulators.items() if e.violations}
    assert not broken, broken  # every reply shaped by a schema follows it
    assert (jobs["metrics.n_errors"] == 0).all() and (jobs["metrics.n_unscored"] == 0).all()
    assert all(math.isfinite(x) for x in jobs["metrics.score_mean"])
    assert (jobs["metrics.cost_total_usd"] > 0).all()  # hosted list prices apply on the providers' own routes
    for role in roles:
        assert jobs[f"metrics.tokens_in_{role}"].sum() > 0 and jobs[f"metrics.cost_usd_{role}"].sum() > 0, role
    assert (jobs["metrics.tokens_in_clarifier"] > 0).all() and (jobs["metrics.cost_usd_clarifier"] > 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["openai", "litellm"])
def test_card_sweep_with_every_model_on_its_providers_emulator(tmp_path, cache_dir, emulators, transport) -> None:
    jobs = run_card_sweep(
        tmp_path,
        cache_dir,
        routed_conf(tmp_path, emulators),
        "clarifier=gpt,ernie,claude",
        "k=1,2,3",
        f"services.llm.transport={transport}",
    )
    assert_clean_sweep(jobs, emulators, ("clarifier", "ua", "rewriter", "judge"))
    assert set(jobs["tags.cts.system"]) == {"gpt", "ernie", "claude"}
    gpt = emulators["gpt"].bodies("/chat/completions")
    assert gpt and all(b["reasoning_effort"] == "low" and "temperature" not in b for b in gpt)
    # the clarifier's questions go as a strict JSON schema (Structured Outputs), in probes and jobs alike
    assert all(b["response_format"]["json_schema"]["name"] == "cts_clarifier" for b in gpt)
    claude = emulators["claude"].bodies("/v1/messages")
    # the role's cap (clarifier 512, rewriter 256, ...) is below the model file's 4096 and wins
    assert claude and all(0 < b["max_tokens"] <= 4096 and b["temperature"] == 0 and "top_p" not in b for b in claude)
    assert all(b["output_format"]["type"] == "json_schema" and "tools" not in b for b in claude)  # litellm's mapping
    ernie = emulators["ernie"].bodies("/v2/chat/completions")
    assert ernie and not any("response_format" in b for b in ernie)  # structured_output: none
    assert emulators["ernie"].bodies("/v2/chat/completions") and emulators["webdancer"].bodies("/v1/chat/completions")
    assert jobs["metrics.tokens_in_search"].sum() > 0  # the WebDancer agent ran on its (vLLM) server


@pytest.fixture(scope="module")
def native_sweep(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Iterator[tuple[Any, dict[str, Any]]]:
    """The card's sweep with Claude, Gemini and ERNIE as clarifiers, Gemini as UA, Claude as judge."""
    tmp_path = tmp_path_factory.mktemp("native")
    with pytest.MonkeyPatch.context() as monkeypatch, started_emulators(monkeypatch) as emulators:
        # The endpoint probe authenticates each route as its provider does (x-goog-api-key for Gemini).
        jobs = run_card_sweep(
            tmp_path,
            cache_dir,
            routed_conf(tmp_path, emulators),
            "clarifier=claude,gemini,ernie",
            "k=1,2,3",
            "ua=gemini",
            "judge=claude",
            "search=extractive",
        )
        yield jobs, emulators


@pytest.mark.slow
@pytest.mark.xdist_group("native_sweep")  # one worker runs the module's sweep
def test_card_sweep_through_anthropic_gemini_and_qianfan_as_clarifier_ua_and_judge(native_sweep) -> None:
    jobs, emulators = native_sweep
    assert_clean_sweep(jobs, emulators, ("clarifier", "ua", "rewriter", "judge"))
    assert set(jobs["tags.cts.system"]) == {"claude", "gemini", "ernie"}
    gemini = emulators["gemini"].bodies(":generateContent")
    assert gemini and all(b["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 1024 for b in gemini)
    schemas = [b["generationConfig"].get("response_json_schema") for b in gemini]
    assert all(
        s is not None and b["generationConfig"]["response_mime_type"] == "application/json"
        for s, b in zip(schemas, gemini)
    )
    assert {tuple(s["required"]) for s in schemas if s} >= {("questions",), ("answer",)}  # clarifier and UA
    # Gemini's completion tokens include its thoughts (usageMetadata.thoughtsTokenCount), so the UA's
    # one-word answers cost more output tokens than their text
    answers = [a for a in emulators["gemini"].answers if a["usageMetadata"].get("thoughtsTokenCount")]
    assert answers and jobs["metrics.tokens_reasoning_ua"].sum() > 0
    assert (
        (jobs["metrics.tokens_out_ua"] >= jobs["metrics.tokens_reasoning_ua"] + 1)
        .where(jobs["metrics.tokens_reasoning_ua"] > 0, True)
        .all()
    )  # thoughts are a part of the output tokens
    claude = [b for b in emulators["claude"].bodies("/v1/messages") if b["max_tokens"] > PROBE_TOKENS]  # not probes
    assert claude and all("system" in b and b["max_tokens"] in (512, 1024) for b in claude)  # clarifier's, judge's


@pytest.mark.slow
@pytest.mark.xdist_group("native_sweep")  # one worker runs the module's sweep
def test_reasoning_tokens_per_role_are_recorded_from_each_providers_usage(native_sweep) -> None:
    jobs, _ = native_sweep
    for role, expected in (("ua", True), ("judge", False)):  # Gemini reports thoughts; Claude thinks not here
        assert (jobs[f"metrics.tokens_reasoning_{role}"].sum() > 0) == expected, role
    gemini = jobs[jobs["tags.cts.system"] == "gemini"]
    assert (gemini["metrics.tokens_reasoning_clarifier"] > 0).all()


def test_the_probe_authenticates_a_gemini_route_as_gemini_does() -> None:
    from cts.compose.model_checks import Endpoint, probe

    with GeminiEmulator() as gemini:
        problem = probe(Endpoint(gemini.base_url, "emulated-key", ("gemini/gemini-2.5-pro",), ("ua.model",)), 5.0)
    assert problem is None, problem  # the key is good: generateContent accepts it
