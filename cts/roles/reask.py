"""The one re-ask loop of every LLM role: ask, parse, and on invalid output ask again."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_MAX_REASKS = 2
"""Re-asks of a role built without the runtime's setting (the composition layer passes ``services.llm.max_reasks``)."""

REASK = (
    "Your previous reply could not be used: {reason}. "
    "Reply again, following the required output format exactly and adding nothing else."
)


class InvalidOutput(ValueError):
    """A model reply that fails validation; the message is shown to the model on re-ask."""


def reask_with_reason(reason: str) -> str:
    """The default re-ask message: the reason the reply could not be used."""
    return REASK.format(reason=reason)


async def ask_until_valid(
    client: Any,
    messages: Sequence[Mapping[str, str]],
    parse: Callable[[str], T],
    *,
    max_reasks: int,
    prompt_version: str,
    params: Mapping[str, Any] | None = None,
    reask: Callable[[str], str] = reask_with_reason,
) -> T:
    """Call the model until ``parse`` accepts its reply, at most ``max_reasks`` more times.

    A re-ask appends the invalid reply and ``reask(reason)`` to the conversation, so it
    differs from the first call (the response cache would replay it otherwise).

    Raises:
        InvalidOutput: Still invalid after the re-asks (the last reason).
    """
    history = list(messages)
    reason = ""
    for _ in range(max_reasks + 1):
        completion = await client.complete(history, prompt_version=prompt_version, **dict(params or {}))
        try:
            return parse(completion.text)
        except InvalidOutput as exc:
            reason = str(exc)
            history = [*history, {"role": "assistant", "content": completion.text},
                       {"role": "user", "content": reask(reason)}]
    raise InvalidOutput(reason)
