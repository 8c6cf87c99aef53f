"""CJK (any non-ASCII) text on the command line must be quoted: Hydra's override grammar takes it only so.

``tracking.experiment=中文`` ends in Hydra's lexer (``LexerNoViableAltException``, a traceback or a
message over several lines); ``'tracking.experiment="中文"'`` sets the same value. ``run.py`` checks
the overrides before Hydra parses them (:func:`cts.compose.validate.command_line_problems`) and
prints the override to type instead.
"""

from __future__ import annotations

import re
import shlex

__all__ = ["unquoted_text_problem"]

_ELEMENT = re.compile(r"(?<=[\[,])([^,\[\]{}'\"]*[^\x00-\x7f][^,\[\]{}'\"]*)(?=[\],])")
"""An unquoted element of a sweep or list that holds a non-ASCII character."""


def unquoted_text_problem(arg: str) -> str | None:
    """The line of an override whose non-ASCII text Hydra cannot parse unquoted, with the override to type; else None."""
    if arg.isascii() or arg.startswith("-") or "=" not in arg or _parses(arg):
        return None
    key, _, value = arg.partition("=")
    if not key.isascii():
        return f"{key}: Hydra takes no CJK text in a key: set it in a config file (the command line may set its value)"
    fixed = f"{key}={_quoted(value)}"
    if not _parses(fixed):
        return f"{arg}: Hydra takes CJK text only quoted: put each CJK value in double quotes, the override in single quotes"
    return f"{arg}: Hydra takes CJK text only quoted: type {shlex.quote(fixed)}"


def _quoted(value: str) -> str:
    """``value`` with its unquoted non-ASCII text in double quotes: the whole value, or each element of a sweep or list."""
    if not any(c in value for c in ",[]{}'\""):
        return f'"{value}"'
    framed = f",{value}," if not value.startswith("[") else value
    quoted = _ELEMENT.sub(lambda m: _element(m.group(1)), framed)
    return quoted if value.startswith("[") else quoted[1:-1]


def _element(text: str) -> str:
    stripped = text.strip()
    return text.replace(stripped, f'"{stripped}"') if stripped else text


def _parses(arg: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        OverridesParser.create().parse_override(arg.lstrip("+~"))
    except HydraException:
        return False
    return True
