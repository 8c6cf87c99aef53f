"""The one re-ask loop of every LLM role: ask, parse, and on invalid output ask again."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from cts.compose.schema import LLM

T = TypeVar("T")

DEFAULT_MAX_REASKS: int = LLM().max_reasks
"""Re-asks of a role built without the runtime's setting (the composition layer passes ``services.llm.max_reasks``)."""

REASK = (
    "Your previous reply could not be used: {reason}. "
    "Reply again, following the required output format exactly and adding nothing else."
)


TRUNCATED = (
    "Your previous reply was cut off at the length limit of {cap} tokens. "
    "Reply again, much more briefly, following the required output format exactly."
)


class InvalidOutput(ValueError):
    """A model reply that fails validation; the message is shown to the model on re-ask."""


class Truncated(InvalidOutput):
    """Every reply stopped at the output cap (``finish_reason`` ``length``): never parsed as complete."""


def reask_with_reason(reason: str) -> str:
    """The default re-ask message: the reason the reply could not be used."""
    return REASK.format(reason=reason)


@dataclass(frozen=True)
class Asking:
    """How a role asks for one reply: its re-asks, prompt version, request params and output cap.

    Attributes:
        max_reasks: Re-asks after an invalid reply (``services.llm.max_reasks`` or the role's own).
        prompt_version: The prompt's version (part of the cache key).
        params: Request params of every call (a JSON schema, decoding params).
        max_output_tokens: The role's output cap (None: the model's).
        reask: The follow-up message after an invalid reply, from its reason.
    """

    max_reasks: int
    prompt_version: str
    params: Mapping[str, Any] | None = None
    max_output_tokens: int | None = None
    reask: Callable[[str], str] = reask_with_reason


async def ask_until_valid(
    client: Any, messages: Sequence[Mapping[str, str]], parse: Callable[[str], T], asking: Asking
) -> T:
    """Call the model until ``parse`` accepts its reply, at most ``asking.max_reasks`` more times.

    A re-ask appends the invalid reply and ``asking.reask(reason)`` to the conversation, so it
    differs from the first call (the response cache would replay it otherwise). A reply
    that stopped at the output cap is not parsed (it may be cut mid-answer): it is
    re-asked with a request to be brief.

    Raises:
        Truncated: The last reply still stopped at the cap.
        InvalidOutput: Still invalid after the re-asks (the last reason).
    """
    max_reasks, prompt_version, max_output_tokens = asking.max_reasks, asking.prompt_version, asking.max_output_tokens
    params, reask = asking.params, asking.reask
    history = list(messages)
    error: InvalidOutput = InvalidOutput("")
    sent = dict(params or {})
    if max_output_tokens is not None:
        sent["max_output_tokens"] = max_output_tokens
    for _ in range(max_reasks + 1):
        completion = await client.complete(history, prompt_version=prompt_version, **sent)
        try:
            if getattr(completion, "truncated", False):
                raise Truncated(f"truncated at the output cap ({max_output_tokens} tokens)")
            return parse(completion.text)
        except Truncated as exc:
            error, retry = exc, TRUNCATED.format(cap=max_output_tokens)
        except InvalidOutput as exc:
            error, retry = exc, reask(str(exc))
        history = [*history, {"role": "assistant", "content": completion.text}, {"role": "user", "content": retry}]
    raise error
