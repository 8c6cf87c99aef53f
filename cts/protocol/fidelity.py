"""How faithful a simulated user is: an audit of the UA's answers against the intent ``q*`` (pure functions).

Per job whose UA plays a persona (``ua/persona``), over every known (not ``unknown``) answer:

- ``ua_leak_rate``: the share of answers that add a fact not in ``q*``: an answer with a content
  token (:func:`cts.text.tokens.content_tokens`: words, CJK bigrams) that neither ``q*`` nor the
  question holds. A closed-book UA may only repeat what the intent states;
- ``ua_answer_tokens``: content tokens per answer, and ``ua_minimality``: the mean of an answer's
  content tokens over its question's (the answer's length against the question's);
- ``ua_known_answers``: how many answers were known; the unknown rate is ``ua_unknown_rate``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from cts.core.records import Record
from cts.core.types import UNKNOWN
from cts.text.tokens import content_tokens

NAN = float("nan")


def leaks(answer: str, fused_query: str, question: str) -> frozenset[str]:
    """The content tokens of ``answer`` that neither the intent nor the question holds."""
    return frozenset(content_tokens(answer)) - set(content_tokens(fused_query)) - set(content_tokens(question))


def ua_fidelity(records: Sequence[Record], intents: Mapping[str, str]) -> dict[str, float]:
    """The audit of the module docstring over ``records``' answers; ``intents``: instance id -> ``q*``."""
    leaked, lengths, ratios = [], [], []
    for r in records:
        intent = intents.get(r.id)
        if intent is None:
            continue
        for question, answer in zip(r.questions, r.answers):
            if answer == UNKNOWN:
                continue
            tokens = content_tokens(answer)
            leaked.append(bool(leaks(answer, intent, question)))
            lengths.append(len(tokens))
            ratios.append(len(tokens) / max(1, len(content_tokens(question))))
    return {
        "ua_known_answers": float(len(leaked)),
        "ua_leak_rate": float(np.mean(leaked)) if leaked else NAN,
        "ua_answer_tokens": float(np.mean(lengths)) if lengths else NAN,
        "ua_minimality": float(np.mean(ratios)) if ratios else NAN,
    }
