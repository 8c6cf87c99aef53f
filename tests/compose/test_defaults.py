"""A key's default is written once, in its schema field: the yaml and the library agree with it.

The yaml Hydra composes must hold the schema's default of every key it sets (or a job would run
with another value than the guide's reference says), and the library's settings objects must
take theirs from the schema (or a caller without a config gets another runtime than a job).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cts.compose import schema
from cts.compose.schema import KEYS, UNSET, KeyInfo, key_at
from cts.llm import LLMSettings
from cts.llm._localserver import LocalLLMServer
from cts.llm.batch import BatchSettings

CONF = Path(__file__).resolve().parents[2] / "conf"
GLOBAL = "# @package _global_"
"""The header of a preset (``experiment=offline``, ``task=score_answers``): it overrides defaults on purpose."""


def mount_of(path: Path) -> str:
    """The package a conf file is composed at: its ``# @package`` line, its binding in config.yaml, or its group."""
    first = path.read_text(encoding="utf-8").partition("\n")[0]
    if first.startswith("# @package"):
        package = first.split()[-1]
        return package
    group = path.parent.relative_to(CONF).as_posix()
    if group == ".":
        return ""
    bound = yaml.safe_load((CONF / "config.yaml").read_text(encoding="utf-8"))["defaults"]
    packages = dict(next(iter(d)).split("@") for d in bound if isinstance(d, dict) and "@" in next(iter(d)))
    return packages.get(group, group.replace("/", "."))


def defaults_set(node: Any, prefix: str) -> Iterator[tuple[str, Any, KeyInfo]]:
    """Every (path, value, key) of a yaml node whose key the schema gives a default."""
    if not isinstance(node, Mapping):
        return
    for name, value in node.items():
        if name == "defaults":
            continue
        path = f"{prefix}.{name}" if prefix else str(name)
        info = key_at(path)
        if info is not None and info.default is not UNSET:
            yield path, value, info
        else:
            yield from defaults_set(value, path)


def same(value: Any, default: Any) -> bool:
    """Equal as the yaml's value (an int where the schema writes a float is the same; a bool is not a number)."""
    return value == default and isinstance(value, bool) == isinstance(default, bool)


CONF_FILES = sorted(p for p in CONF.rglob("*.yaml") if not p.read_text(encoding="utf-8").startswith(GLOBAL))


@pytest.mark.parametrize("path", CONF_FILES, ids=lambda p: p.relative_to(CONF).as_posix())
def test_every_yaml_default_the_schema_knows_is_the_schema_s(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    wrong = [
        f"{key}: the yaml says {value!r}, the schema {info.default!r}"
        for key, value, info in defaults_set(data, mount_of(path))
        if not same(value, info.default)
    ]
    assert not wrong, f"{path.relative_to(CONF)}: " + "; ".join(wrong)


def test_the_comparison_sees_the_files_that_hold_defaults() -> None:
    seen = {
        p.relative_to(CONF).as_posix(): len(list(defaults_set(yaml.safe_load(p.read_text()), mount_of(p))))
        for p in CONF_FILES
    }
    assert seen["llm/default.yaml"] >= 25
    assert seen["config.yaml"] >= 15
    assert seen["tracking/mlflow.yaml"] == 6
    assert seen["local_llm/smollm2_135m.yaml"] == 7
    assert mount_of(CONF / "llm" / "default.yaml") == "services.llm"


def composed(*overrides: str) -> dict[str, Any]:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    data = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(data, dict)
    return data


def at(data: Mapping[str, Any], path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return UNSET
        data = data[part]
    return data


def test_the_composed_config_holds_every_schema_default() -> None:
    """A key the schema gives a default is in the yaml too (``python -m cts.compose.schema`` writes it)."""
    data = composed("local_llm=smollm2_135m")
    missing = [
        k.path
        for k in KEYS
        if k.default is not UNSET and "*" not in k.path and k.path != "services.local_llm"
        if not same(at(data, k.path), k.default)
    ]
    assert not missing, f"not in the composed yaml at the schema's default: {missing}"


def schema_node(path: str) -> dict[str, Any]:
    """The schema's defaults of the node at ``path``, as the yaml would hold them."""
    out: dict[str, Any] = {}
    for k in KEYS:
        if k.path.startswith(path + ".") and k.default is not UNSET and "*" not in k.path:
            node = out
            *parents, leaf = k.path[len(path) + 1 :].split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = k.default
    return out


def test_the_library_settings_take_the_schema_s_defaults() -> None:
    """A caller without a config (a library user, a benchmark) gets the runtime a job gets."""
    assert LLMSettings() == LLMSettings.from_mapping(schema_node("services.llm"))
    assert LLMSettings() == LLMSettings.from_mapping(composed()["services"]["llm"])
    assert BatchSettings() == BatchSettings.from_mapping(schema_node("services.llm.batch"))
    local = schema_node("services.local_llm")
    assert dataclasses.replace(LocalLLMServer(), **local) == LocalLLMServer()
    assert LLMSettings().concurrency_per_endpoint == 64  # the yaml's, which every job ran with (Python said 16)


def test_the_library_uses_the_schema_s_nodes_as_they_are() -> None:
    settings = LLMSettings()
    assert type(settings.backoff) is schema.Backoff
    assert type(settings.adaptive) is schema.Adaptive
    assert type(settings.api_base_price) is schema.Price


def test_a_yaml_value_other_than_the_schema_s_is_reported(tmp_path: Path) -> None:
    data = {"concurrency_per_endpoint": 16, "backoff": {"max": 30.0}, "tracing": 0}
    wrong = [(k, v) for k, v, info in defaults_set(data, "services.llm") if not same(v, info.default)]
    assert wrong == [("services.llm.concurrency_per_endpoint", 16), ("services.llm.tracing", 0)]
