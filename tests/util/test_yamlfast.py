"""config.yaml through libyaml: the text OmegaConf's own dumper writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from cts._util import yamlfast
from cts._util.yamlfast import config_yaml

CONF = Path(__file__).resolve().parents[2] / "conf"

AWKWARD: dict[str, Any] = {
    "looks_typed": ["1e3", "true", "10", "null", "~", "0x10", "1_000", "", "1.5", "off"],
    "syntax": ["- x", ": y", "#c", "'q'", '"dq"', "a: b", "[x]", "{y}", "*ref", "&anchor", "!tag", "%p", "@at"],
    "cjk": "这个问题需要澄清吗？ 东京 2024",
    "long": "x" * 200 + " y" * 60,
    "whitespace": {"lead": " a", "trail": "b ", "lines": "multi\nline\ttab", "sep": "a\u2028b"},
    "numbers": {"f": 1.0, "small": 1e-5, "big": 1e300, "neg": -3, "none": None, "yes": True},
    "nested": [{"a": [1, {"b": []}], "c": {}}],
    "path": "C:\\Users\\x",
}


def _resolved(*overrides: str) -> dict[str, Any]:
    """A job's resolved config, as ``RunInfo.config`` holds it (``${hydra:...}`` resolved, Hydra's node left out)."""
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    try:
        tree = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)
    finally:
        HydraConfig.instance().cfg = None  # type: ignore[assignment]  # as it was: no job running
    assert isinstance(tree, dict)
    return tree


@pytest.mark.parametrize("overrides", [(), ("experiment=offline",), ("clarifier=gpt", "k=3")])
def test_a_jobs_config_is_written_as_omegaconf_writes_it(overrides: tuple[str, ...]) -> None:
    tree = _resolved(*overrides)
    assert config_yaml(tree) == OmegaConf.to_yaml(OmegaConf.create(tree))


def test_awkward_values_are_written_as_omegaconf_writes_them_and_read_back_the_same() -> None:
    text = config_yaml(AWKWARD)
    assert text == OmegaConf.to_yaml(OmegaConf.create(AWKWARD))
    assert OmegaConf.to_container(OmegaConf.create(text)) == AWKWARD


def test_a_character_outside_the_bmp_takes_omegaconfs_dumper() -> None:
    tree = {"name": "clarifier 😀", "k": 2}
    assert "\\U" in yamlfast.yaml.dump(tree, Dumper=yamlfast._Dumper, allow_unicode=True)  # libyaml escapes it
    assert config_yaml(tree) == OmegaConf.to_yaml(OmegaConf.create(tree)) == "name: clarifier 😀\nk: 2\n"
