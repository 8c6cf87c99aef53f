"""A typed schema per config node: each key's type, bounds, meaning and part in the protocol, declared once.

The schemas are dataclasses (as Hydra's own plugins declare their configs), one per node of
``conf/``; the yaml keeps the defaults. Derived from them: the value checks
(:mod:`cts.compose.validate`), the fingerprint's protocol part (:func:`protocol_part`, used by
:mod:`cts.compose.job_config`) and the guide's key reference (:func:`reference`).

They are not registered in Hydra's ConfigStore: a structured config would type-convert values
(``bootstrap.confidence=1`` would reach the checks as ``1.0``, ``k=two`` would fail inside
Hydra with its own message instead of the one ``error:`` line), and it fights the composition:
``plan`` is a bool or a node (``plan=true``), presets add nodes (``robustness``, ``build_gold``)
and the role groups hold whatever keys their component takes.
"""

from cts.compose.schema._components import K_MAX, K_MIN
from cts.compose.schema._keys import UNSET, Check, KeyInfo, integer, key, keys_of, number, one_of
from cts.compose.schema._run import CLOSED, LLM, Config, LocalLLM, Services
from cts.compose.schema._table import (
    KEYS,
    MOUNTS,
    ORDERED,
    compile_pattern,
    declared,
    key_at,
    operational_top,
    ordered,
    protocol_part,
    reference,
)

__all__ = [
    "CLOSED",
    "K_MAX",
    "K_MIN",
    "KEYS",
    "LLM",
    "MOUNTS",
    "ORDERED",
    "UNSET",
    "Check",
    "Config",
    "KeyInfo",
    "LocalLLM",
    "Services",
    "compile_pattern",
    "declared",
    "integer",
    "key",
    "key_at",
    "keys_of",
    "number",
    "one_of",
    "operational_top",
    "ordered",
    "protocol_part",
    "reference",
]
