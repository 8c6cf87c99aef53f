"""A config tree as the YAML ``OmegaConf.to_yaml`` writes, emitted by libyaml (a tenth of the CPU).

``OmegaConf.to_yaml`` runs PyYAML's pure-Python emitter: about 20 ms of CPU for a job's
resolved config, once per job of a sweep. libyaml's emitter, with OmegaConf's own rule for
quoting strings that would read back as another type, writes the same text, except that it
escapes characters outside the Basic Multilingual Plane (an emoji) in a double-quoted string
where PyYAML writes them as they are; such a tree goes through OmegaConf's dumper as before
(``tests/util/test_yamlfast.py`` compares both on real configs and on awkward values).
"""

from __future__ import annotations

from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf._utils import OmegaConfDumper

_Emitter: type = getattr(yaml, "CDumper", yaml.Dumper)  # PyYAML built without libyaml: the Python emitter


class _Dumper(_Emitter):
    """libyaml's emitter with OmegaConf's string representer ('1e3', 'true' and '10' quoted)."""


_Dumper.add_representer(str, OmegaConfDumper.str_representer)


def config_yaml(tree: dict[str, Any]) -> str:
    """``OmegaConf.to_yaml(OmegaConf.create(tree))`` for a resolved config of plain values (dicts, lists, scalars)."""
    text: str = yaml.dump(tree, Dumper=_Dumper, default_flow_style=False, allow_unicode=True, sort_keys=False)
    if "\\U" in text:  # an escaped astral character (or a backslash and a U, checked the slow way)
        return OmegaConf.to_yaml(OmegaConf.create(tree))
    return text
