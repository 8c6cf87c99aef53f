"""LLM roles of the closed-book protocol (prompts A-E of the paper).

Each role renders its prompt from ``prompts/``, calls its model through the
job's :class:`cts.llm.LLMRuntime` (cache, retries, accounting), then repairs and
validates the reply. An invalid reply is re-asked (the bad reply plus a short
correction is appended to the conversation) at most ``max_reasks`` times; then
the role raises :class:`cts.types.UnscoredError`, and the item is recorded as
unscored, never as 0.

Signatures follow :mod:`cts.types`: the Clarifier and Rewriter take no
``fused_query``, so the hidden intent cannot reach them.

The User Answerer's "don't know" is always the protocol token ``unknown``:
replies such as ``Unknown.``, ``"unknown"``, ``UNKNOWN``, ``Not specified``, or a
whole-reply Chinese equivalent (``未知``, ``不知道``, ``未提及``, ``无法确定`` ...)
are normalised to it; an answer that merely contains such a word is kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import json_repair

from cts.llm import ModelSpec
from cts.prompts import load_prompt
from cts.services import Services
from cts.types import LABELS, QA, UNKNOWN, Evidence, GoldDraft, Label, Nugget, UnscoredError

__all__ = [
    "InvalidOutput",
    "LLMClarifier",
    "LLMExtractor",
    "LLMJudge",
    "LLMRewriter",
    "LLMUserAnswerer",
    "normalise_answer",
    "parse_gold",
    "parse_labels",
    "parse_query",
    "parse_questions",
]

T = TypeVar("T")

REASK = (
    "Your previous reply could not be used: {reason}. "
    "Reply again, following the required output format exactly and adding nothing else."
)
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


class InvalidOutput(ValueError):
    """A model reply that fails validation; the message is shown to the model on re-ask."""


# ---------------------------------------------------------------- parsing


def _strip_reply(text: str) -> str:
    """Drop reasoning blocks and code fences around a reply."""
    return _FENCE.sub("", _THINK.sub("", text).strip()).strip()


def _load_json(text: str) -> Any:
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
    data = _load_json(text)
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


def normalise_answer(text: str) -> str:
    """The User Answerer's reply as a minimal answer or the token ``unknown``."""
    lines = [line for line in _strip_reply(text).splitlines() if line.strip()]
    if not lines:
        raise InvalidOutput("the answer is empty")
    answer = _UNQUOTED.sub("", _PREFIX.sub("", _UNQUOTED.sub("", lines[0])))
    if not answer:
        raise InvalidOutput("the answer is empty")
    return UNKNOWN if _key(answer) in _UNKNOWN_FORMS or _UNKNOWN_LEAD.match(answer) else answer


def parse_query(text: str) -> str:
    """One rewritten query on a single line."""
    lines = [line.strip() for line in _strip_reply(text).splitlines() if line.strip()]
    if len(lines) != 1:
        raise InvalidOutput(f"expected the query alone on one line, got {len(lines)} lines")
    query = _UNQUOTED.sub("", _PREFIX.sub("", lines[0]))
    if not query:
        raise InvalidOutput("the query is empty")
    return query


def parse_labels(text: str, ids: Sequence[str]) -> dict[str, Label]:
    """One label in full/partial/none for every nugget id (and no other ids)."""
    data = _load_json(text)
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
    return {i: labels[i] for i in ids}  # type: ignore[misc]


def parse_gold(text: str, evidence_ids: Sequence[str]) -> GoldDraft:
    """A validated GOLD draft: weighted nuggets citing only known evidence ids."""
    data = _load_json(text)
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


# ---------------------------------------------------------------- roles


class _LLMRole:
    """Shared plumbing: prompt, client, bounded re-asks."""

    default_role: ClassVar[str]

    def __init__(
        self,
        model: ModelSpec | Mapping[str, Any],
        prompt: str,
        services: Services,
        role: str | None = None,
        max_reasks: int | None = None,
        prompts_dir: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        """Bind a prompt and a model.

        Args:
            model: The model spec (or its config mapping) from ``conf/model/``.
            prompt: Prompt file stem under ``prompts_dir``.
            services: The job's services; the LLM runtime comes from ``services.llm``.
            role: Accounting name (defaults to the class's role).
            max_reasks: Re-asks after invalid output (None = ``services.llm.max_reasks``).
            prompts_dir: Directory of prompt files (None = the repository's ``prompts/``).
            params: Decoding params overriding the model's for this role.
        """
        self.role = role or self.default_role
        self.prompt = load_prompt(prompt, prompts_dir)
        self.client = services.llm.client(ModelSpec.coerce(model), role=self.role)
        self.max_reasks = services.llm.settings.max_reasks if max_reasks is None else max_reasks
        self.params = dict(params or {})

    async def _ask(self, parse: Callable[[str], T], **values: Any) -> T:
        messages = self.prompt.messages(**values)
        reason = ""
        for _ in range(self.max_reasks + 1):
            completion = await self.client.complete(
                messages, prompt_version=self.prompt.version, **self.params
            )
            try:
                return parse(completion.text)
            except InvalidOutput as exc:
                reason = str(exc)
                messages = [
                    *messages,
                    {"role": "assistant", "content": completion.text},
                    {"role": "user", "content": REASK.format(reason=reason)},
                ]
        raise UnscoredError(f"{self.role}: invalid output after {self.max_reasks} re-ask(s): {reason}")


class LLMClarifier(_LLMRole):
    """Prompt A: exactly ``k`` single-dimension questions from the blurred query only."""

    default_role = "clarifier"

    async def ask(self, blurred_query: str, k: int) -> list[str]:
        """Return exactly ``k`` distinct clarification questions about ``blurred_query``."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        return await self._ask(lambda text: parse_questions(text, k), blurred_query=blurred_query, k=k)


class LLMUserAnswerer(_LLMRole):
    """Prompt B: answers one question from the intent only, else ``unknown``."""

    default_role = "ua"

    async def answer(self, fused_query: str, question: str) -> str:
        """Return a minimal answer stated in ``fused_query``, or ``unknown``."""
        return await self._ask(normalise_answer, fused_query=fused_query, question=question)


class LLMRewriter(_LLMRole):
    """Prompt C: one query from the blurred query and the Q&A pairs only."""

    default_role = "rewriter"

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str:
        """Return the rewritten query (the blurred query itself when there are no pairs)."""
        if not qa:
            return blurred_query
        pairs = "\n".join(f"Q{i}: {p.question}\nA{i}: {p.answer}" for i, p in enumerate(qa, 1))
        return await self._ask(parse_query, blurred_query=blurred_query, qa_pairs=pairs)


class LLMJudge(_LLMRole):
    """Prompt E: strict full/partial/none per nugget, all nuggets in one call."""

    default_role = "judge"

    async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]:
        """Return one label per nugget id."""
        if not nuggets:
            return {}
        ids = [n.id for n in nuggets]
        listing = "\n".join(f"{n.id}: {n.text}" for n in nuggets)
        return await self._ask(lambda text: parse_labels(text, ids), answer=answer, nuggets=listing)


class LLMExtractor(_LLMRole):
    """Prompt D: evidence-grounded weighted nuggets (the static GOLD JSON)."""

    default_role = "extractor"

    async def extract(self, fused_query: str, answer: str, evidence: Sequence[Evidence]) -> GoldDraft:
        """Return a GOLD draft whose nuggets cite only ids of ``evidence``."""
        listing = "\n\n".join(f"[{e.id}] {e.title} ({e.source})\n{e.snippet}" for e in evidence)
        ids = [e.id for e in evidence]
        return await self._ask(
            lambda text: parse_gold(text, ids),
            fused_query=fused_query,
            answer=answer,
            evidence=listing or "(none)",
        )
