"""Question typer roles: the lexicon typer (default) and a model-based typer.

Both return labels from :data:`cts.text.qtypes.QTYPES`; see :mod:`cts.text.qtypes` for the rules.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from cts.llm import Chat
from cts.roles import schemas
from cts.roles.reask import DEFAULT_MAX_REASKS, Asking, InvalidOutput, ask_until_valid
from cts.text.qtypes import QTYPES, classify_question, normalize_types

log = logging.getLogger(__name__)


class LexiconQuestionTyper:
    """The default typer: English + Chinese cue lexicons (:func:`classify_question`)."""

    async def classify(self, question: str) -> tuple[str, ...]:
        """Return the question's types in :data:`QTYPES` order."""
        return classify_question(question)


_REASK = f"That was not a JSON array of labels from {list(QTYPES)}. Reply with the JSON array only."


class LLMQuestionTyper:
    """Types questions with a model; falls back to the lexicon on invalid output.

    The model must answer with a JSON array of labels from :data:`QTYPES`. Invalid
    output is re-asked ``max_reasks`` times; after that the lexicon typer answers
    (and a warning is logged), because a diagnostic label is not worth losing an
    otherwise scored instance for.
    """

    def __init__(
        self,
        model: Chat,
        prompt: str = "qtyper",
        max_reasks: int = DEFAULT_MAX_REASKS,
        prompts_dir: str | None = None,
        max_output_tokens: int = 64,
        structured: bool = True,
    ) -> None:
        """Args:
        model: Chat client of the model (built from a ``conf/model`` entry by the composition layer).
        prompt: Name of the prompt file in ``prompts/`` (placeholder ``question``).
        max_reasks: Re-asks after invalid output (unset in the config: ``services.llm.max_reasks``).
        prompts_dir: Directory of prompt files (None = the repository's ``prompts/``).
        max_output_tokens: Output cap (a JSON array of a few labels); a cut reply falls back too.
        structured: Send the reply's JSON schema (``{"types": [...]}``) where the model honours one.
        """
        from cts._util.prompts import PromptError, load_prompt

        self.prompt = load_prompt(prompt, prompts_dir)
        if self.prompt.placeholders != {"question"}:
            raise PromptError(f"prompt {prompt!r} must have exactly the placeholder question")
        self.client = model.with_role("qtyper")
        self.max_reasks = int(max_reasks)
        self.max_output_tokens = int(max_output_tokens)
        shape = schemas.response_format("qtyper", schemas.question_types())
        self.params = {"response_format": shape} if structured else {}

    default_role = "qtyper"

    @classmethod
    def example_schema(cls) -> dict[str, Any]:
        """The typer's schema (the same for every call)."""
        return schemas.question_types()

    async def classify(self, question: str) -> tuple[str, ...]:
        """Return the model's labels for ``question`` (lexicon labels after invalid output)."""
        try:
            return await ask_until_valid(
                self.client,
                self.prompt.messages(question=question),
                _checked_types,
                Asking(
                    self.max_reasks, self.prompt.version, self.params, self.max_output_tokens, lambda _reason: _REASK
                ),
            )
        except InvalidOutput:
            log.warning("qtyper: invalid output after %d re-ask(s); lexicon fallback", self.max_reasks)
            return classify_question(question)


def _checked_types(text: str) -> tuple[str, ...]:
    labels = parse_question_types(text)
    if labels is None:
        raise InvalidOutput("not a JSON array of question types")
    return labels


def parse_question_types(text: str) -> tuple[str, ...] | None:
    """Parse a model reply into canonical types, or None when it is not a valid label list.

    Accepts a JSON array (possibly inside a code fence or surrounded by prose), or
    a JSON object with a ``types`` / ``labels`` array (the role's schema asks for ``types``)
    or with one key only (JSON mode wraps the array the prompt asks for in an object).
    """
    from json_repair import repair_json

    match = re.search(r"\[.*?\]|\{.*\}", text, re.DOTALL)
    if not match:
        return None
    try:
        value = json.loads(repair_json(match.group(0)))
    except (ValueError, TypeError):
        return None
    if isinstance(value, dict):
        value = value.get("types", value.get("labels", next(iter(value.values())) if len(value) == 1 else None))
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        return None
    try:
        return normalize_types(value)
    except ValueError:
        return None
