"""Parsers of the LLM roles' replies (prompts A-E); each raises :class:`InvalidOutput` with a reason."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

import json_repair

from cts.core.types import LABELS, UNKNOWN, GoldDraft, Label, Nugget
from cts.roles.reask import InvalidOutput

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^```[\w-]*\s*|\s*```$")
_UNQUOTED = re.compile(r"^[\s\"'`“”‘’「」『』]+|[\s\"'`“”‘’「」『』.。!！]+$")
_PREFIX = re.compile(
    r"^(?:answer|a|rewritten query|query|答案|回答|答|改写后的查询|改写查询|查询)\s*[:：]\s*", re.IGNORECASE
)
_UNKNOWN_LEAD = re.compile(r"^unknown\s*[-–—:;,.(（，。：；]", re.IGNORECASE)  # "unknown - not stated"
_UNKNOWN_FORMS = frozenset(
    {
        "unknown",
        "not specified",
        "unspecified",
        "not mentioned",
        "not stated",
        "not given",
        "n/a",
        "i don't know",
        "未知",
        "不知道",
        "不清楚",
        "未提及",
        "未说明",
        "未指定",
        "未明确",
        "无法确定",
        "不确定",
        "无法回答",
    }
)


def _strip_reply(text: str) -> str:
    """Drop reasoning blocks and code fences around a reply."""
    return _FENCE.sub("", _THINK.sub("", text).strip()).strip()


def load_json(text: str) -> Any:
    """Parse JSON leniently, but refuse replies cut off inside a string.

    ``json_repair`` fixes quotes, commas and missing closing brackets; a reply
    that ends inside a string literal (odd number of unescaped double quotes)
    was truncated, and "repairing" it would keep a cut-off question or label.
    """
    body = _strip_reply(text)
    try:
        return json.loads(body)
    except ValueError:
        pass
    if len(re.findall(r'(?<!\\)"', body)) % 2:
        raise InvalidOutput("the JSON is truncated (it ends inside a string)")
    data = json_repair.loads(body)
    if data in ("", None):
        raise InvalidOutput("no JSON found in the reply")
    return data


def _key(text: str) -> str:
    return " ".join(text.casefold().split())


def parse_questions(text: str, k: int) -> list[str]:
    """Exactly ``k`` distinct non-empty question strings from a JSON array reply."""
    data = load_json(text)
    if isinstance(data, dict) and len(data) == 1:
        data = next(iter(data.values()))  # {"questions": [...]}
    if not isinstance(data, list) or not all(isinstance(q, str) for q in data):
        raise InvalidOutput("expected a JSON array of question strings")
    questions = [q.strip() for q in data]
    if not all(questions):
        raise InvalidOutput("every question must be a non-empty string")
    if len({_key(q) for q in questions}) != len(questions):
        raise InvalidOutput("the questions must be distinct")
    if len(questions) != k:
        raise InvalidOutput(f"expected exactly {k} question(s), got {len(questions)}")
    return questions


STOP_ALLOWED = 'If the answers so far already pin down what the user wants, reply {"stop": true} instead of asking.'
STOP_FORBIDDEN = "Always ask a question; do not stop."


def parse_turn(text: str, asked: Sequence[str], may_stop: bool) -> str | None:
    """One sequential turn: a new question, or None for ``{"stop": true}`` when stopping is allowed."""
    data = load_json(text)
    if isinstance(data, list) and len(data) == 1:
        data = {"question": data[0]}
    if isinstance(data, str):
        data = {"question": data}
    if not isinstance(data, dict):
        raise InvalidOutput('expected {"question": "..."} or {"stop": true}')
    if data.get("stop") is True and not str(data.get("question") or "").strip():
        if not may_stop:
            raise InvalidOutput("stopping is not allowed: ask one question")
        return None
    question = str(data.get("question") or "").strip()
    if not question:
        raise InvalidOutput('expected a non-empty "question" string')
    if _key(question) in {_key(q) for q in asked}:
        raise InvalidOutput("this question was already asked; ask about another dimension")
    return question


def unwrapped(text: str, key: str) -> str:
    """The string under ``key`` of a reply shaped ``{"<key>": "..."}`` (the role's schema), else ``text``.

    Raises:
        InvalidOutput: The reply is a JSON object without that string (or cut off inside it).
    """
    body = _strip_reply(text)
    if not body.startswith("{"):
        return text
    data = load_json(body)
    if not isinstance(data, dict) or not isinstance(data.get(key), str):
        raise InvalidOutput(f'expected {{"{key}": "..."}} or the {key} alone')
    return data[key]


def normalise_answer(text: str) -> str:
    """The User Answerer's reply (plain, or ``{"answer": ...}``) as a minimal answer or the token ``unknown``."""
    lines = [line for line in _strip_reply(unwrapped(text, "answer")).splitlines() if line.strip()]
    if not lines:
        raise InvalidOutput("the answer is empty")
    answer = _UNQUOTED.sub("", _PREFIX.sub("", _UNQUOTED.sub("", lines[0])))
    if not answer:
        raise InvalidOutput("the answer is empty")
    return UNKNOWN if _key(answer) in _UNKNOWN_FORMS or _UNKNOWN_LEAD.match(answer) else answer


def parse_query(text: str) -> str:
    """One rewritten query on a single line (plain, or ``{"query": ...}``)."""
    lines = [line.strip() for line in _strip_reply(unwrapped(text, "query")).splitlines() if line.strip()]
    if len(lines) != 1:
        raise InvalidOutput(f"expected the query alone on one line, got {len(lines)} lines")
    query = _UNQUOTED.sub("", _PREFIX.sub("", lines[0]))
    if not query:
        raise InvalidOutput("the query is empty")
    return query


def parse_nugget_labels(text: str, ids: Sequence[str]) -> dict[str, Label]:
    """One label in full/partial/none for every nugget id (and no other ids)."""
    data = load_json(text)
    if isinstance(data, dict) and isinstance(data.get("labels"), (dict, list)):
        data = data["labels"]
    if isinstance(data, list):
        data = {str(i.get("id")): i.get("label") for i in data if isinstance(i, dict)}
    if not isinstance(data, dict):
        raise InvalidOutput('expected a JSON object mapping nugget ids to labels, e.g. {"n1": "full"}')
    labels = {str(k).strip(): str(v).strip().lower() for k, v in data.items()}
    missing, extra = [i for i in ids if i not in labels], sorted(set(labels) - set(ids))
    bad = sorted(i for i, label in labels.items() if label not in LABELS)
    problems = [
        f"missing ids {missing}" if missing else "",
        f"unknown ids {extra}" if extra else "",
        f"invalid labels for {bad} (use full, partial or none)" if bad else "",
    ]
    if any(problems):
        raise InvalidOutput("; ".join(p for p in problems if p))
    return {i: cast(Label, labels[i]) for i in ids}  # each one checked against LABELS above


def parse_gold(text: str, evidence_ids: Sequence[str]) -> GoldDraft:
    """A validated GOLD draft: weighted nuggets citing only known evidence ids."""
    data = load_json(text)
    if not isinstance(data, dict) or not isinstance(data.get("nuggets"), list) or not data["nuggets"]:
        raise InvalidOutput('expected a JSON object with a non-empty "nuggets" array')
    nuggets = tuple(_nugget(item, n, set(evidence_ids)) for n, item in enumerate(data["nuggets"], 1))
    if len({n.id for n in nuggets}) != len(nuggets):
        raise InvalidOutput("nugget ids must be unique")
    return GoldDraft(
        nuggets=nuggets,
        must_cover=_strings(data, "must_cover"),
        missing_evidence=_strings(data, "missing_evidence"),
        unsupported_claims=_strings(data, "unsupported_claims"),
    )


def _nugget(item: Any, n: int, known: set[str]) -> Nugget:
    if not isinstance(item, dict) or not str(item.get("text") or "").strip():
        raise InvalidOutput(f"nugget {n} needs a non-empty text")
    weight = item.get("weight")
    if isinstance(weight, str) and weight.strip().isdigit():
        weight = int(weight)
    if isinstance(weight, bool) or weight not in (1, 2, 3):
        raise InvalidOutput(f"nugget {n} needs an integer weight 1, 2 or 3, got {weight!r}")
    cited = item.get("evidence_ids") or []
    cited = [str(e) for e in (cited if isinstance(cited, list) else [cited])]
    unknown = [e for e in cited if e not in known]
    if unknown or (known and not cited):
        raise InvalidOutput(f"nugget {n} must cite supporting evidence ids from the list; bad: {unknown}")
    return Nugget(str(item.get("id") or f"n{n}"), str(item["text"]).strip(), int(weight), tuple(cited))


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key) or []
    items = value if isinstance(value, list) else [value]
    return tuple(str(v).strip() for v in items if str(v).strip())
