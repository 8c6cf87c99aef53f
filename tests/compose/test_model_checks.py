"""Pre-flight: every model's key variable (or api_base) is checked by config path, without litellm."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from cts.compose.model_checks import find_model_specs, preflight_problems, spec_key_problems
from cts.llm import ModelSpec

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
KEYS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "QIANFAN_API_KEY",
    "DASHSCOPE_API_KEY",
    "MOONSHOT_API_KEY",
    "DEEPSEEK_API_KEY",
)
STACK = ["clarifier=gpt", "ua=ernie", "rewriter=qwen", "judge=claude", "extractor=deepseek"]


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)


def composed(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides)


def test_finds_every_model_by_path() -> None:
    paths = [path for path, _ in find_model_specs(composed(STACK))]
    assert {"clarifier.model", "ua.model", "rewriter.model", "judge.model", "extractor.model"} <= set(paths)


def test_lists_every_missing_variable_by_role_path() -> None:
    problems = preflight_problems(composed(STACK))
    expected = {
        "clarifier.model (gpt): OPENAI_API_KEY is not set",
        "ua.model (ernie): QIANFAN_API_KEY is not set",
        "rewriter.model (qwen): DASHSCOPE_API_KEY is not set",
        "judge.model (claude): ANTHROPIC_API_KEY is not set",
        "extractor.model (deepseek): DEEPSEEK_API_KEY is not set",
    }
    assert expected <= set(problems)


def test_set_key_clears_its_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    problems = preflight_problems(composed(STACK))
    assert not any("OPENAI_API_KEY" in p for p in problems)
    assert any("QIANFAN_API_KEY" in p for p in problems)


def test_global_api_base_needs_no_keys() -> None:
    assert preflight_problems(composed([*STACK, "services.llm.api_base=http://127.0.0.1:9/v1"])) == []


def test_keyless_model_needs_an_api_base() -> None:
    spec = {"_target_": "cts.llm.ModelSpec", "name": "local", "id": "openai/m", "api_key_env": None}
    cfg = OmegaConf.create(
        {
            "search": {"model": {**spec, "api_base": None}},
            "judge": {"model": {**spec, "api_base": "http://127.0.0.1:9/v1"}},
            "services": {"llm": {"api_base": None}},
        }
    )
    assert preflight_problems(cfg) == [
        "search.model (local): no api_base and no key variable (set the model's api_base)"
    ]


def test_unresolvable_interpolations_are_skipped() -> None:
    cfg = OmegaConf.create(
        {
            "paths": {"out": "${hydra:runtime.output_dir}"},
            "clarifier": {
                "model": {
                    "_target_": "cts.llm.ModelSpec",
                    "name": "gpt",
                    "id": "openai/gpt-5.2",
                    "api_key_env": "OPENAI_API_KEY",
                }
            },
        }
    )
    assert preflight_problems(cfg) == ["clarifier.model (gpt): OPENAI_API_KEY is not set"]


def test_preflight_does_not_import_litellm() -> None:
    code = (
        "import sys; from omegaconf import DictConfig, OmegaConf; from cts.compose.model_checks import preflight_problems; "
        "preflight_problems(OmegaConf.create({})); assert 'litellm' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


OLD_MODEL_FILE = "_target_: cts.llm.ModelSpec\nname: mine\nmodel: openai/my-model\napi_key_env: null\n"
"""A user's model file written before the litellm id's key was renamed ``model:`` -> ``id:``."""


def test_a_model_file_with_the_old_id_key_is_named_with_the_rename() -> None:
    old = {"_target_": "cts.llm.ModelSpec", "name": "mine", "model": "openai/my-model"}
    cfg = OmegaConf.create({"clarifier": {"model": old}, "judge": {"model": {**old, "id": "x", "temprature": 0}}})
    assert spec_key_problems(cfg) == [
        "clarifier.model: model mine: the litellm id is `id:` now (it was `model:`): "
        "write `id: openai/my-model` in conf/model/mine.yaml",
        "judge.model (mine): unknown model file keys ['model', 'temprature']",
    ]
    with pytest.raises(ValueError, match="the litellm id is `id:` now"):
        ModelSpec.coerce(old)
    assert spec_key_problems(composed(STACK)) == []  # the shipped registry


def test_a_run_with_an_old_model_file_stops_with_one_line_naming_the_rename(tmp_path: Path) -> None:
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "mine.yaml").write_text(OLD_MODEL_FILE)
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "run.py"),
            "--config-dir",
            str(tmp_path / "conf"),
            "clarifier=mine",
            "limit=1",
            f"hydra.run.dir={tmp_path / 'run'}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: clarifier.model: model mine: the litellm id is `id:` now (it was `model:`): "
        "write `id: openai/my-model` in conf/model/mine.yaml"
    ]
    assert not (tmp_path / "run").exists() and not (tmp_path / "mlflow.db").exists()
