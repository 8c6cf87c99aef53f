"""A key's default is written once, in its schema field: the yaml and the library agree with it.

The yaml Hydra composes must hold the schema's default of every key it sets (or a job would run
with another value than the guide's reference says), and the library's settings objects must
take theirs from the schema (or a caller without a config gets another runtime than a job).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cts.compose import schema
from cts.compose.schema import KEYS, UNSET, KeyInfo, key, key_at, keys_of
from cts.compose.schema._yaml import default_files, owned, with_key, write_missing
from cts.llm import LLMSettings
from cts.llm._localserver import LocalLLMServer
from cts.llm.batch import BatchSettings

CONF = Path(__file__).resolve().parents[2] / "conf"
FILES = default_files(CONF)
"""Every conf file that holds defaults, with its mount (presets, which override them on purpose, left out)."""


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


@pytest.mark.parametrize("path", sorted(FILES), ids=lambda p: p.relative_to(CONF).as_posix())
def test_every_yaml_default_the_schema_knows_is_the_schema_s(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    wrong = [
        f"{key}: the yaml says {value!r}, the schema {info.default!r}"
        for key, value, info in defaults_set(data, FILES[path])
        if not same(value, info.default)
    ]
    assert not wrong, f"{path.relative_to(CONF)}: " + "; ".join(wrong)


def test_the_comparison_sees_the_files_that_hold_defaults() -> None:
    seen = {
        p.relative_to(CONF).as_posix(): len(list(defaults_set(yaml.safe_load(p.read_text()), m)))
        for p, m in FILES.items()
    }
    assert seen["llm/default.yaml"] >= 25
    assert seen["config.yaml"] >= 15
    assert seen["tracking/mlflow.yaml"] == 6
    assert seen["local_llm/smollm2_135m.yaml"] == 7
    assert FILES[CONF / "llm" / "default.yaml"] == "services.llm"
    assert FILES[CONF / "local_llm" / "gemma3_270m.yaml"] == "services.local_llm"
    assert not any(p.parent.name == "experiment" for p in FILES)  # presets override defaults on purpose


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


def test_every_default_is_in_its_file_so_the_writer_has_nothing_to_write(tmp_path: Path) -> None:
    shutil.copytree(CONF, tmp_path / "conf")
    assert write_missing(tmp_path / "conf") == []
    owners = {(p.relative_to(CONF).as_posix(), k.path) for p, k in owned(FILES)}
    assert ("llm/default.yaml", "services.llm.batch.max_requests") in owners
    assert ("config.yaml", "bootstrap.n_resamples") in owners
    assert ("local_llm/smollm2_135m.yaml", "services.local_llm.n_ctx") in owners
    assert not any(k.startswith("services.llm") for f, k in owners if f == "config.yaml")


@dataclass(frozen=True, kw_only=True)
class Warmup:
    """A node a contributor adds, with a key in it."""

    calls: int = key("calls sent to warm an endpoint before the job", 2, protocol=False, ge=0)


def test_a_key_added_to_the_schema_is_written_into_its_node_with_its_meaning() -> None:
    text = "# the runtime\nbatch:\n  roles: []   # accounting roles\n  # the ledger\n  dir: null\n\ntracing: false\n"
    (calls,) = [k for k in keys_of(Warmup, "services.llm.warmup")]
    budget = dataclasses.replace(calls, path="services.llm.batch.budget_s", default=300.0, meaning="seconds")
    into_batch = with_key(text, ["batch", "budget_s"], budget)
    assert into_batch.split("\n")[4:6] == ["  dir: null", "  budget_s: 300.0  # seconds"]
    new_node = with_key(text, ["warmup", "calls"], calls)
    assert new_node.endswith("tracing: false\nwarmup:\n  calls: 2  # calls sent to warm an endpoint before the job\n")
    assert (
        yaml.safe_load(new_node)["warmup"] == {"calls": 2} and yaml.safe_load(into_batch)["batch"]["budget_s"] == 300.0
    )
