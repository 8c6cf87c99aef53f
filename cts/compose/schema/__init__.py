"""A typed schema per config node: each key's type, bounds, meaning and part in the protocol, declared once.

The schemas are dataclasses (as Hydra's own plugins declare their configs), one per node of
``conf/``; a key's default is written in its field only (the yaml under ``conf/`` holds the same
value, checked by tests/compose/test_defaults.py, and the library's settings read it from
here: :mod:`cts.llm` uses :class:`Backoff`, :class:`Price` and :class:`Adaptive` as they are).
Derived from them: the value checks
(:mod:`cts.compose.validate`), the fingerprint's protocol part (:func:`protocol_part`, used by
:mod:`cts.compose.job_config`) and the guide's key reference (:func:`reference`).

They are not registered in Hydra's ConfigStore: a structured config would type-convert values
(``bootstrap.confidence=1`` would reach the checks as ``1.0``, ``k=two`` would fail inside
Hydra with its own message instead of the one ``error:`` line), and it fights the composition:
``plan`` is a bool or a node (``plan=true``), presets add nodes (``robustness``, ``build_gold``)
and the role groups hold whatever keys their component takes.
"""

from cts.compose.schema._components import K_MAX, K_MIN
from cts.compose.schema._keys import UNSET, Check, KeyInfo, default_of, integer, key, keys_of, node_from, number, one_of
from cts.compose.schema._run import (
    CLOSED,
    LLM,
    Adaptive,
    Backoff,
    Batch,
    Bootstrap,
    Config,
    LocalLLM,
    Plan,
    Price,
    Services,
)
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
    "Adaptive",
    "Backoff",
    "Batch",
    "Bootstrap",
    "Check",
    "Config",
    "KeyInfo",
    "LocalLLM",
    "Plan",
    "Price",
    "Services",
    "compile_pattern",
    "declared",
    "default_of",
    "integer",
    "key",
    "key_at",
    "keys_of",
    "node_from",
    "number",
    "one_of",
    "operational_top",
    "ordered",
    "protocol_part",
    "reference",
]
