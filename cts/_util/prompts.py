"""Prompt templates stored as data files under ``prompts/``.

A prompt file is Markdown with named placeholders written ``{{name}}`` (so
literal braces in JSON examples need no escaping) and optional role sections
introduced by a line ``<!-- role: system -->`` or ``<!-- role: user -->``.
Text before the first marker belongs to the user message. Other HTML comments
(``<!-- ... -->``) are notes for humans and are never sent to a model.

Every loaded prompt is remembered, so a run can log the prompts it used
(:func:`used_prompts`) and one combined version hash (:func:`prompts_version`).
Each job records into its own registry (:func:`prompt_scope`), so in a sequential
multirun a job never logs the prompts an earlier job of the same process loaded.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Prompt",
    "PromptError",
    "default_prompts_dir",
    "load_prompt",
    "prompt_scope",
    "prompts_version",
    "used_prompts",
]

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_ROLE_MARKER = re.compile(r"^<!--\s*role:\s*(system|user|assistant)\s*-->\s*$", re.MULTILINE)
_COMMENT = re.compile(r"<!--(?!\s*role:).*?-->\n?", re.DOTALL)
_PROCESS_USED: dict[str, Prompt] = {}  # outside any job scope (scripts, notebooks)
_USED: contextvars.ContextVar[dict[str, Prompt] | None] = contextvars.ContextVar("cts_used_prompts", default=None)
_USED_LOCK = threading.Lock()


class PromptError(ValueError):
    """A prompt is missing, or rendered with missing or extra values."""


@dataclass(frozen=True)
class Prompt:
    """One prompt template.

    Attributes:
        name: File stem, e.g. ``clarifier``.
        text: The raw template text.
        version: First 12 hex digits of the sha256 of ``text``.
        path: The file it was loaded from (None when built in code).
    """

    name: str
    text: str
    version: str
    path: Path | None = None

    @property
    def placeholders(self) -> frozenset[str]:
        """Names of every ``{{placeholder}}`` in the template."""
        return frozenset(_PLACEHOLDER.findall(self.text))

    def render(self, **values: Any) -> str:
        """Fill every placeholder (the whole text, role markers included).

        Raises:
            PromptError: A placeholder has no value, or a value has no placeholder.
        """
        self._check(values)
        return _substitute(self.text, values)

    def messages(self, **values: Any) -> list[dict[str, str]]:
        """Render into chat messages, one per role section (see module docstring).

        Raises:
            PromptError: As :meth:`render`.
        """
        self._check(values)
        return [
            {"role": role, "content": _substitute(body, values).strip()}
            for role, body in _sections(_COMMENT.sub("", self.text))
            if body.strip()
        ]

    def _check(self, values: Mapping[str, Any]) -> None:
        missing = self.placeholders - set(values)
        extra = set(values) - self.placeholders
        if missing or extra:
            raise PromptError(
                f"prompt {self.name!r}: missing values {sorted(missing)}, unexpected values {sorted(extra)}"
            )


def default_prompts_dir() -> Path:
    """The repository's ``prompts/`` directory (next to the ``cts`` package)."""
    return Path(__file__).resolve().parents[2] / "prompts"


def load_prompt(name: str, prompts_dir: str | Path | None = None) -> Prompt:
    """Load ``<prompts_dir>/<name>.md`` and remember it as used by this run.

    Args:
        name: Prompt name (file stem).
        prompts_dir: Directory of prompt files (None = :func:`default_prompts_dir`).

    Raises:
        PromptError: No such prompt file.
    """
    path = Path(prompts_dir or default_prompts_dir()) / f"{name}.md"
    if not path.is_file():
        raise PromptError(f"no prompt file {path.name!r} in the prompts directory {path.parent.name!r}")
    text = path.read_text(encoding="utf-8")
    prompt = Prompt(name, text, hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], path)
    with _USED_LOCK:
        _registry()[name] = prompt
    return prompt


def _registry() -> dict[str, Prompt]:
    scoped = _USED.get()
    return _PROCESS_USED if scoped is None else scoped


@contextlib.contextmanager
def prompt_scope() -> Iterator[dict[str, Prompt]]:
    """Record the prompts loaded inside the block in a fresh registry (one job's).

    Asyncio tasks and ``asyncio.to_thread`` calls started inside the block inherit it.
    """
    token = _USED.set({})
    try:
        yield _registry()
    finally:
        _USED.reset(token)


def used_prompts() -> dict[str, Prompt]:
    """Every prompt loaded in the current job (or, outside any job, this process), by name."""
    with _USED_LOCK:
        return dict(_registry())


def prompts_version(prompts: Iterable[Prompt] | None = None) -> str:
    """One short hash over the names and versions of ``prompts`` (default: all used)."""
    chosen = used_prompts().values() if prompts is None else prompts
    joined = "\n".join(sorted(f"{p.name}:{p.version}" for p in chosen))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:12]


def _substitute(text: str, values: Mapping[str, Any]) -> str:
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)


def _sections(text: str) -> list[tuple[str, str]]:
    parts = _ROLE_MARKER.split(text)
    sections = [("user", parts[0])] if parts[0].strip() else []
    sections += [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]
    return sections
