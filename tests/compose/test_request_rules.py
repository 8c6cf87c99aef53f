"""The registry's request rules (``request:`` in ``conf/model/*.yaml``) and the start-up check.

A parameter a model's provider rejects, set anywhere the config sends it from (the model
file, a role's ``params``, the search backend's sampling keys), fails the pre-flight with a
message naming the model, the parameter, the documented rule and the config path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cts.compose.app import preflight_problems_of, task_groups
from cts.compose.request_rules import rule_problems
from cts.llm._rules import RequestRules, request_params, rule_violations
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
GPT_RULE = "OpenAI reasoning models take only the default temperature (1) unless reasoning_effort is none"


def composed(*overrides: str, conf: Path = CONF):
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_every_model_file_states_its_providers_rules_with_a_source() -> None:
    for name in MODELS:
        rules = RequestRules.coerce(composed(f"clarifier={name}").clarifier.model.request)
        assert rules.source.startswith("https://"), name
        assert rules.cap_param in ("max_tokens", "max_completion_tokens"), name
        assert not rules.cap_includes_reasoning or rules.reasoning_allowance >= 0, name
        text = (CONF / "model" / f"{name}.yaml").read_text(encoding="utf-8")
        assert "request:" in text and "https://" in text.split("request:", 1)[1], name  # cited in a comment


@pytest.mark.parametrize("name", MODELS)
def test_the_shipped_registry_passes_the_start_up_check_in_every_llm_role(name: str) -> None:
    cfg = composed(f"clarifier={name}", f"ua={name}", f"rewriter={name}", f"judge={name}", "search=extractive")
    assert rule_problems(cfg) == []


def test_gpt_5_2_is_sent_a_reasoning_effort_and_its_cap_as_max_completion_tokens() -> None:
    gpt = composed("clarifier=gpt").clarifier.model
    rules = RequestRules.coerce(gpt.request)
    assert "temperature" not in gpt.params and gpt.params.reasoning_effort == "low"
    assert (rules.cap_param, rules.cap_includes_reasoning, rules.reasoning_allowance) == (
        "max_completion_tokens",
        True,
        4096,
    )
    assert request_params(rules, dict(gpt.params), 64) == {"reasoning_effort": "low", "max_completion_tokens": 4160}


def test_a_gpt_5_model_file_with_temperature_0_is_refused_naming_the_model_the_parameter_and_the_rule() -> None:
    cfg = composed("clarifier=gpt", "+clarifier.model.params.temperature=0")
    (problem,) = preflight_problems_of(cfg, task_groups(cfg))[-1:]
    assert problem.startswith("clarifier.model (gpt): model gpt (openai/gpt-5.2) does not accept `temperature`")
    assert GPT_RULE in problem and "platform.openai.com" in problem
    assert problem.endswith("[set in clarifier.model.params.temperature]")


def test_the_card_command_with_temperature_0_on_gpt_fails_at_start_within_seconds(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    gpt = conf / "model" / "gpt.yaml"
    gpt.write_text(gpt.read_text().replace("  reasoning_effort: low\n", "  reasoning_effort: low\n  temperature: 0\n"))
    keys = {k: "dummy" for k in ("OPENAI_API_KEY", "QIANFAN_API_KEY", "ANTHROPIC_API_KEY")}
    env = {**os.environ, **keys, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    started = time.monotonic()
    proc = run_script(
        [
            str(REPO / "run.py"),
            "--config-path",
            str(conf),
            "-m",
            "clarifier=gpt,ernie,claude",
            "k=1,2,3",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        ],
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "cts pre-flight failed; nothing was run" in proc.stderr and GPT_RULE in proc.stderr
    assert "model gpt (openai/gpt-5.2) does not accept `temperature`" in proc.stderr
    assert "the model file's `request:` node cites each rule" in proc.stderr
    assert elapsed < 30 and not list(tmp_path.glob("sweep/**/records.jsonl"))  # nothing started, nothing committed


def test_effort_none_is_gpt_5_2s_documented_way_to_take_temperature() -> None:
    assert (
        rule_problems(
            composed(
                "clarifier=gpt", "clarifier.model.params.reasoning_effort=none", "+clarifier.model.params.temperature=0"
            )
        )
        == []
    )
    problems = rule_problems(composed("clarifier=gpt", "clarifier.model.params.reasoning_effort=minimal"))
    assert len(problems) == 1 and "`reasoning_effort=minimal`" in problems[0]


def test_the_search_backends_sampling_keys_count_for_its_agent_model() -> None:
    # conf/search/webdancer.yaml sends temperature 0.6 and top_p 0.95 to search.model
    problems = rule_problems(composed("model@search.model=gpt"))
    assert [p.rsplit("[set in ", 1)[1] for p in problems] == ["search.temperature]", "search.top_p]"]
    assert all(p.startswith("search.model (gpt): ") for p in problems)
    assert rule_problems(composed("model@search.model=gpt", "search.temperature=null", "search.top_p=null")) == []


def test_claude_refuses_temperature_with_top_p_from_any_two_sources() -> None:
    (problem,) = rule_problems(composed("model@search.model=claude"))  # its temperature 0, WebDancer's top_p
    assert "does not accept `temperature + top_p`" in problem
    assert problem.endswith("[set in search.temperature, search.top_p]")


def test_role_params_and_summary_params_reach_their_models() -> None:
    cfg = composed(
        "model@search.summary_model=gemini",
        "search.summary_params.temperature=0",
        "+search.summary_params.reasoning_effort=none",
        "clarifier=gpt",
        "+clarifier.params.top_p=0.5",
    )
    problems = rule_problems(cfg)
    assert any(
        p.startswith("clarifier.model (gpt)") and p.endswith("[set in clarifier.params.top_p]") for p in problems
    ), problems
    assert any(
        p.startswith("search.summary_model (gemini)")
        and "`reasoning_effort=none`" in p
        and p.endswith("[set in search.summary_params.reasoning_effort]")
        for p in problems
    ), problems


def test_one_server_for_every_role_is_not_checked_against_the_hosted_providers_rules() -> None:
    cfg = composed(
        "clarifier=gpt", "+clarifier.model.params.temperature=0", "services.llm.api_base=http://127.0.0.1:9/v1"
    )
    assert rule_problems(cfg) == []


def test_rules_reject_values_combinations_and_honour_exceptions_and_defaults() -> None:
    rules = RequestRules.coerce(
        {
            "rejected": {"temperature": "only 1"},
            "rejected_values": {"effort": {"off": "cannot turn off"}},
            "accepted_with": {"temperature": [{"effort": "none"}, {"temperature": 1}]},
            "defaults": {"effort": "none"},
            "together": [{"params": ["a", "b"], "rule": "one of a, b"}],
            "source": "https://example.org/doc",
        }
    )
    assert rules.refused({"temperature": 0}) == []  # the provider's default effort is none
    assert rules.refused({"temperature": 0, "effort": "low"}) == [("temperature", "only 1")]
    assert rules.refused({"temperature": 1.0, "effort": "low"}) == []
    assert rules.refused({"effort": "OFF"}) == [("effort=off", "cannot turn off")]
    assert rules.refused({"a": 1, "b": 2, "temperature": None}) == [("a + b", "one of a, b")]
    (message,) = rule_violations("m", "p/m", rules, {"a": 1, "b": 2})
    assert message == "model m (p/m) does not accept `a + b`: one of a, b (https://example.org/doc)"


def test_an_output_cap_is_never_a_rejected_parameter_but_renamed() -> None:
    with pytest.raises(ValueError, match="output cap"):
        RequestRules.coerce({"rejected": {"max_tokens": "use max_completion_tokens"}})
    rules = RequestRules.coerce(
        {"cap_param": "max_completion_tokens", "cap_includes_reasoning": True, "reasoning_allowance": 100}
    )
    assert request_params(rules, {"max_tokens": 50, "x": 1}, None) == {"x": 1, "max_completion_tokens": 50}
    assert request_params(rules, {"max_tokens": 500}, 64) == {"max_completion_tokens": 164}


def test_a_requested_response_format_the_rules_drop_is_named_at_launch(capsys: pytest.CaptureFixture[str]) -> None:
    from cts.compose.request_rules import unapplied_params, warn_unapplied_params

    overrides = ["clarifier=ernie", "judge=deepseek", "+clarifier.params={response_format: {type: json_object}}"]
    overrides.append(
        "+judge.params={response_format: {type: json_schema, json_schema: {name: j, schema: {type: object}}}}"
    )
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    lines = unapplied_params(cfg)
    assert lines == [
        "clarifier.model (ernie): response_format json_object dropped (request.structured_output: none) "
        "[set in clarifier.params.response_format]",
        "judge.model (deepseek): response_format json_schema -> json_object (request.structured_output: json_object) "
        "[set in judge.params.response_format]",
    ]
    warn_unapplied_params([cfg, cfg])
    printed = capsys.readouterr().err.splitlines()
    assert [p.split("as asked: ", 1)[1] for p in printed] == lines  # once each, however many jobs
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        assert (
            unapplied_params(compose("config", overrides=["clarifier=gpt"])) == []
        )  # the roles' own schemas are not config
