"""Recognise secrets in config keys and values, so they are never written to disk or MLflow.

Keys reach jobs through the environment (``${oc.env:VAR}``); these helpers keep the
resolved values out of the files launchers write and out of the params a run logs.
"""

from __future__ import annotations

import re
from typing import TypeVar, cast

_SECRET_KEY = re.compile(
    r"(^|[._])(api_key|apikey|secret|secret_key|password|passwd|access_token|auth_token)$", re.IGNORECASE
)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@\s]+@")
REDACTED = "***"
_Tree = TypeVar("_Tree")


def is_secret_key(name: str) -> bool:
    """Whether a config key (dotted path) names a secret, e.g. ``services.llm.api_key``."""
    return bool(_SECRET_KEY.search(name.lstrip("+~")))


def has_url_password(value: str) -> bool:
    """Whether ``value`` contains a URL with a password (``scheme://user:pw@host``)."""
    return bool(_URL_PASSWORD.search(value))


def scrub(name: str, value: str) -> str:
    """``value`` safe to log under ``name``: a secret key's value hidden, URL passwords masked."""
    if is_secret_key(name) and value not in ("", "None", "null"):
        return REDACTED
    return _URL_PASSWORD.sub(rf"\1{REDACTED}@", value)


def scrub_tree(obj: _Tree, prefix: str = "") -> _Tree:
    """A copy of a resolved config (nested dicts/lists) with :func:`scrub` applied to every leaf."""
    # The casts: the copy has the shape (and type) of ``obj``; mypy cannot see that through the branches.
    if isinstance(obj, dict):
        return cast(_Tree, {k: scrub_tree(v, f"{prefix}{k}.") for k, v in obj.items()})
    if isinstance(obj, list):
        return cast(_Tree, [scrub_tree(v, prefix) for v in obj])
    if isinstance(obj, str):
        return cast(_Tree, scrub(prefix.rstrip("."), obj))
    return obj
