"""One-file model registry and config typos.

Adding ``conf/model/<name>.yaml`` makes every LLM role group accept ``<name>``
(hydra_plugins/cts_model_roles); a misspelt key of any group fails at start with a
message naming the key.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from cts.app import preflight_problems_of, task_groups

CONF = Path(__file__).resolve().parents[1] / "conf"
NEW_MODEL = """_target_: cts.llm.ModelSpec
name: newmodel
model: openai/new-model-7b
api_base: http://127.0.0.1:9/v1
api_key_env: null
params: {temperature: 0}
input_cost_per_token: 0
output_cost_per_token: 0
max_concurrency: null
"""


def test_a_new_model_file_makes_every_role_option(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "model" / "newmodel.yaml").write_text(NEW_MODEL)
    overrides = ["clarifier=newmodel", "search=extractive", "judge=newmodel", "ua=newmodel", "rewriter=newmodel", "extractor=newmodel"]
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    for group, target in (("clarifier", "LLMClarifier"), ("judge", "LLMJudge"), ("ua", "LLMUserAnswerer"),
                          ("rewriter", "LLMRewriter"), ("extractor", "LLMExtractor")):
        assert cfg[group]._target_ == f"cts.roles.llm.{target}"
        assert cfg[group].model.model == "openai/new-model-7b" and cfg[group].prompt == group
    problems = preflight_problems_of(cfg, task_groups(cfg))
    assert not [p for p in problems if "newmodel" in p], problems  # keyless with an api_base: reachable


def test_the_card_options_and_baselines_still_compose() -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for name in ("gpt", "ernie", "claude"):
            cfg = compose("config", overrides=[f"clarifier={name}"])
            assert cfg.clarifier.model.name == name and cfg.ua.model.name == "ernie"
        cfg = compose("config", overrides=["experiment=offline", "clarifier=rules_region"])
        assert cfg.clarifier._target_ == "cts.roles.rules.RuleClarifier" and cfg.judge.full == 0.8
        with pytest.raises(ConfigCompositionException, match="nosuchmodel"):
            compose("config", overrides=["clarifier=nosuchmodel"])


GROUPS = ["dataset", "clarifier", "ua", "rewriter", "search", "judge", "extractor", "qtyper", "search.provider",
          "search.fetcher", "clarifier.model"]


@pytest.mark.parametrize("group", GROUPS)
def test_a_misspelt_key_fails_at_start_naming_it(group: str) -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        with pytest.raises(ConfigCompositionException, match="treshold"):  # a plain override: Hydra refuses it
            compose("config", overrides=[f"{group}.treshold=0.5"])
        offline = compose("config", overrides=["experiment=offline", f"+{group}.treshold=0.5"]) \
            if group in ("dataset", "clarifier", "ua", "rewriter", "judge", "extractor", "qtyper") else None
        cfg = compose("config", overrides=[f"+{group}.treshold=0.5"])
    for c in filter(None, (cfg, offline)):
        problems = preflight_problems_of(c, task_groups(c))
        assert any(p.startswith(f"{group}.treshold:") for p in problems), problems
