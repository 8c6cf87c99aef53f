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

from cts.compose.app import preflight_problems_of, task_groups
from tests.prewarmed import run_script

CONF = Path(__file__).resolve().parents[2] / "conf"
NEW_MODEL = """_target_: cts.llm.ModelSpec
name: newmodel
id: openai/new-model-7b
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
    overrides = [
        "clarifier=newmodel",
        "search=extractive",
        "judge=newmodel",
        "ua=newmodel",
        "rewriter=newmodel",
        "extractor=newmodel",
    ]
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    for group, target in (
        ("clarifier", "LLMClarifier"),
        ("judge", "LLMJudge"),
        ("ua", "LLMUserAnswerer"),
        ("rewriter", "LLMRewriter"),
        ("extractor", "LLMExtractor"),
    ):
        assert cfg[group]._target_ == f"cts.roles.llm.{target}"
        assert cfg[group].model.id == "openai/new-model-7b" and cfg[group].prompt == group
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


GROUPS = [
    "dataset",
    "clarifier",
    "ua",
    "rewriter",
    "search",
    "judge",
    "extractor",
    "qtyper",
    "search.provider",
    "search.fetcher",
    "clarifier.model",
]


@pytest.mark.parametrize("group", GROUPS)
def test_a_misspelt_key_fails_at_start_naming_it(group: str) -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        with pytest.raises(ConfigCompositionException, match="treshold"):  # a plain override: Hydra refuses it
            compose("config", overrides=[f"{group}.treshold=0.5"])
        offline = (
            compose("config", overrides=["experiment=offline", f"+{group}.treshold=0.5"])
            if group in ("dataset", "clarifier", "ua", "rewriter", "judge", "extractor", "qtyper")
            else None
        )
        cfg = compose("config", overrides=[f"+{group}.treshold=0.5"])
    for c in filter(None, (cfg, offline)):
        problems = preflight_problems_of(c, task_groups(c))
        assert any(p.startswith(f"{group}.treshold:") for p in problems), problems


def print_job_config(*args: str, cwd: Path, pythonpath: Path | None = None) -> str:
    """``python run.py <args> --cfg job``: the composed config, as the command line composes it."""
    import os
    import subprocess
    import sys

    repo = CONF.parent
    extra = [str(pythonpath)] if pythonpath else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*extra, str(repo), os.environ.get("PYTHONPATH", "")])}
    proc = run_script(
        [str(repo / "run.py"), *args, "--cfg", "job"],
        cwd=cwd,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def roles_of(printed: str) -> dict[str, tuple[str, str]]:
    """Per LLM role: (``_target_``, model id) of the printed config."""
    import yaml

    cfg = yaml.safe_load(printed)
    return {g: (cfg[g]["_target_"], cfg[g]["model"]["id"]) for g in ("clarifier", "ua", "judge")}


def model_dir(root: Path, name: str) -> Path:
    (root / "model").mkdir(parents=True)
    (root / "model" / f"{name}.yaml").write_text(NEW_MODEL.replace("newmodel", name))
    return root


WANT = {
    "clarifier": ("cts.roles.llm.LLMClarifier", "openai/new-model-7b"),
    "ua": ("cts.roles.llm.LLMUserAnswerer", "openai/new-model-7b"),
    "judge": ("cts.roles.llm.LLMJudge", "openai/new-model-7b"),
}


def test_a_model_file_on_hydra_searchpath_makes_every_role_option(tmp_path: Path) -> None:
    extra = model_dir(tmp_path / "my models", "searchmodel")
    # A hand-written role file of the same dir wins over the generated option, as in conf/.
    (extra / "ua").mkdir()
    (extra / "ua" / "searchmodel.yaml").write_text(
        "defaults:\n  - /model@model: searchmodel\n  - _self_\n_target_: cts.roles.llm.LLMUserAnswerer\nprompt: ua\n"
        "note: hand-written\n"
    )
    printed = print_job_config(
        f"hydra.searchpath=[file://{extra}]",
        "clarifier=searchmodel",
        "ua=searchmodel",
        "judge=searchmodel",
        cwd=tmp_path,
    )
    assert roles_of(printed) == WANT
    assert "note: hand-written" in printed


def test_a_model_file_in_a_package_on_hydra_searchpath_and_in_config_dir(tmp_path: Path) -> None:
    pkg = model_dir(tmp_path / "site" / "extra_cts_models", "pkgmodel")
    (pkg / "__init__.py").write_text("")
    printed = print_job_config(
        "hydra.searchpath=[pkg://extra_cts_models]",
        "clarifier=pkgmodel",
        "ua=pkgmodel",
        "judge=pkgmodel",
        cwd=tmp_path,
        pythonpath=tmp_path / "site",
    )
    assert roles_of(printed) == WANT
    model_dir(tmp_path / "cd", "cdmodel")
    printed = print_job_config("--config-dir", "cd", "clarifier=cdmodel", "ua=cdmodel", "judge=cdmodel", cwd=tmp_path)
    assert roles_of(printed) == WANT


def test_command_line_dirs_reads_config_dir_and_hydra_searchpath(tmp_path: Path) -> None:
    from hydra_plugins.cts_model_roles.cts_model_roles import command_line_dirs

    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    argv = [
        "run.py",
        "-cd",
        str(a),
        f"--config-dir={b}",
        f"hydra.searchpath=[file://{c},pkg://no_such_pkg_x]",
        "clarifier=gpt",
        f"+hydra.searchpath=[{tmp_path / 'missing'}]",
    ]
    assert command_line_dirs(argv) == [a, b, c]
    assert command_line_dirs(["run.py", "hydra.searchpath=[unclosed"]) == []
