"""Simulated users of other kinds than the protocol's cooperative UA (config group ``ua/persona``).

Work on simulated users finds LLM simulators too cooperative, which inflates what clarification
seems to gain; ClarifyMT-Bench varies the user. A persona changes how the UA answers, never what
it sees (still ``q*`` and one question): ``cooperative`` (the protocol's UA), ``terse``, ``vague``,
``unknown_prone`` (``unknown`` with probability ``unknown_p``), ``off_target`` (a nearby facet).
Each has an LLM prompt (``prompts/<prompt>.md``) and, where a rule can play it honestly, a rule
baseline (``rule``, applied by :class:`cts.roles.rules.RuleUserAnswerer`); ``vague`` has none.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from cts.core.types import UNKNOWN
from cts.text.tokens import is_cjk

Rule = Literal["cooperative", "terse", "off_target"]
RULES: tuple[str, ...] = ("cooperative", "terse", "off_target")

__all__ = ["RULES", "Persona", "Rule"]


@dataclass(frozen=True)
class Persona:
    """How a simulated user answers.

    Attributes:
        name: The persona's name (the option of ``ua/persona``).
        prompt: The LLM UA's prompt stem under ``prompts/`` (``ua``: the protocol's Prompt B).
        rule: What the rule baseline does (None: the persona has none).
        unknown_p: Probability of answering ``unknown`` whatever the intent states.
        max_words: Words a terse rule answer keeps (CJK: 2 characters a word).
        seed: Seed of the ``unknown`` coin.
    """

    name: str
    prompt: str = "ua"
    rule: Rule | None = "cooperative"
    unknown_p: float = 0.0
    max_words: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.unknown_p <= 1.0:
            raise ValueError(f"persona {self.name}: unknown_p must be in [0, 1], got {self.unknown_p}")
        if self.rule is not None and self.rule not in RULES:
            raise ValueError(f"persona {self.name}: rule must be one of {', '.join(RULES)} or null, got {self.rule!r}")
        if self.max_words < 1:
            raise ValueError(f"persona {self.name}: max_words must be at least 1, got {self.max_words}")

    def withholds(self, fused_query: str, question: str) -> bool:
        """Whether this (intent, question) draws ``unknown``: a coin from their hash and the seed.

        The same in every run, repeat and process (sha256, not Python's salted ``hash``), and
        independent of the order the questions come in.
        """
        if self.unknown_p <= 0.0:
            return False
        key = f"{self.seed}\x1f{fused_query}\x1f{question}".encode()
        draw = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2.0**64
        return draw < self.unknown_p

    def shorten(self, answer: str) -> str:
        """A terse answer: the first ``max_words`` words (CJK: ``2 * max_words`` characters); ``unknown`` stays."""
        if answer == UNKNOWN or self.rule != "terse":
            return answer
        if is_cjk(answer):
            return answer.replace(" ", "")[: 2 * self.max_words]
        return " ".join(answer.split()[: self.max_words])
