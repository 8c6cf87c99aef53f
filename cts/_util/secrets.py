"""Recognise secrets in config keys and values, so they are never written to disk or MLflow.

Keys reach jobs through the environment (``${oc.env:VAR}``) or, against advice, the command line.
Two kinds of masking keep them out of what cts writes:

- by key: the value of a setting whose name says secret (``*api_key``, ``*password`` ...) and
  a URL's password (:func:`scrub`, :func:`scrub_tree`: config files, MLflow params, overrides);
- by value: every key this process read (:func:`remember`: the ``*api_key*`` settings, the
  variables a model's ``api_key_env`` names, the key each request is sent with) and what looks
  like a key (``Bearer ...``, ``sk-...``, ``api_key=...``), wherever it appears in a text
  (:func:`redact`: error bodies a provider echoes, log lines, Hydra's ``.hydra/*.yaml``).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

_NAMES = r"api_key|apikey|secret|secret_key|password|passwd|access_token|auth_token"
_SECRET_KEY = re.compile(rf"(^|[._])({_NAMES})$", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@\s]+@")
REDACTED = "***"
MIN_LENGTH = 8
"""Shorter values are not masked by value (a provider's key is longer; a short one would mask words)."""
_KEY_LIKE = re.compile(
    r"(?P<lead>\b(?:x-api-key|x-goog-api-key|api[_-]?key|authorization)[\"']?\s*[:=]\s*[\"']?(?:bearer\s+)?|\bbearer\s+)"
    r"(?!\*\*\*|\$\{|null\b|none\b)[^\s\"',;&}]{4,}"
    r"|\b(?:sk-[A-Za-z0-9_-]{16,}|AIza[0-9A-Za-z_-]{30,}|bce-v3/[A-Za-z0-9/_-]{16,})"
    rf"|(?P<key>(?<![\w.])(?:[\w-]+\.)*[\w-]*(?:{_NAMES}))=(?!\*\*\*|\$\{{|null\b|'\$\{{)[^\s,'\"]+",
    re.IGNORECASE,
)
_OVERRIDE_SECRET = re.compile(rf"(?:{_NAMES})=(?!\*\*\*|\$|null\b|'\$)")
"""An override in a saved file that gives a secret literally (``...api_key=sk-1``; a ``$`` value refers)."""
_MAYBE_KEY = (
    "bearer",
    "api_key",
    "api-key",
    "apikey",
    "authorization",
    "secret",
    "passw",
    "_token",
    "sk-",
    "aiza",
    "bce-v3",
)
"""A cheap first look (a regex with ``IGNORECASE`` costs 50 us a log line): text without any has no key look."""
_YAML_SECRET = re.compile(rf"^ *[\w-]*(?:{_NAMES}) *:(?! *(?:null *$|'?\$\{{|'' *$|$))", re.MULTILINE)
_NOT_SECRET = frozenset({"", "None", "null", "sk-no-key-needed"})  # sk-no-key-needed: the dummy key cts sends
_KNOWN: set[str] = set()
_KNOWN_LOCK = threading.Lock()
_Tree = TypeVar("_Tree")


def is_secret_key(name: str) -> bool:
    """Whether a config key (dotted path) names a secret, e.g. ``services.llm.api_key``."""
    return bool(_SECRET_KEY.search(name.lstrip("+~")))


def has_url_password(value: str) -> bool:
    """Whether ``value`` contains a URL with a password (``scheme://user:pw@host``)."""
    return bool(_URL_PASSWORD.search(value))


def scrub(name: str, value: str) -> str:
    """``value`` safe to log under ``name``: a secret key's value hidden, URL passwords and known keys masked."""
    if is_secret_key(name) and value not in ("", "None", "null"):
        return REDACTED
    return _known_masked(_URL_PASSWORD.sub(rf"\1{REDACTED}@", value))


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


def remember(*values: object) -> None:
    """Mask these values (keys this process read or was given) in every later :func:`redact`."""
    fresh = {v for v in values if isinstance(v, str) and len(v) >= MIN_LENGTH and v not in _NOT_SECRET}
    if fresh - _KNOWN:
        with _KNOWN_LOCK:
            _KNOWN.update(fresh)


def _known_masked(text: str) -> str:
    known = tuple(_KNOWN)
    if not known or not any(k in text for k in known):
        return text
    for key in sorted(known, key=len, reverse=True):  # a key inside a longer one: the longer first
        text = text.replace(key, REDACTED)
    return text


def redact(text: str) -> str:
    """``text`` with every remembered key and everything that looks like a key replaced by ``***``.

    For what cts writes that a provider or a user may have put a key into: error bodies, log
    lines, the overrides Hydra saves. ``Bearer sk-...`` keeps ``Bearer``; ``api_key=...`` its name.
    """
    text = _known_masked(text)
    lowered = text.lower()
    return _KEY_LIKE.sub(_masked_match, text) if any(k in lowered for k in _MAYBE_KEY) else text


def _masked_match(match: re.Match[str]) -> str:
    if match.group("lead"):
        return match.group("lead") + REDACTED
    if match.group("key"):
        return f"{match.group('key')}={REDACTED}"
    return REDACTED


def literal_secrets(overrides: Sequence[str]) -> list[str]:
    """Command-line overrides that give a secret literally (their keys): it would land in files as typed.

    A value that interpolates the environment (``${oc.env:VAR}``) is fine: what is written is
    the reference. A literal value, or a URL with a password, is not.
    """
    return [key for _, key, secret in _overrides_read(overrides) if secret]


def _overrides_read(overrides: Sequence[str]) -> list[tuple[str, str, bool]]:
    """``(override, key, whether it gives a secret literally)`` of each override."""
    from cts._util.naming import override_items  # Hydra's parser: only where overrides are read

    found = []
    for text, (key, value) in zip(overrides, override_items(overrides)):  # unescaped: $\{oc.env\:VAR\} is ${...}
        literal = bool(value) and "${" not in value and value.lower() != "null"
        found.append((text, key, (is_secret_key(key) and literal) or has_url_password(value)))
    return found


def masked_overrides(overrides: Sequence[str]) -> list[str]:
    """``overrides`` as written, each literal secret's value masked (``key=***``) and known keys redacted."""
    return [
        redact(f"{key}={REDACTED}" if secret and is_secret_key(key) else _URL_PASSWORD.sub(rf"\1{REDACTED}@", text))
        for text, key, secret in _overrides_read(overrides)
    ]


def redact_yaml_file(path: Path) -> bool:
    """Rewrite a YAML file Hydra saved (``.hydra/*.yaml``, ``multirun.yaml``) with its secrets masked.

    Interpolations (``${oc.env:VAR}``) stay: they name where a key is, not the key. The file is
    replaced atomically (jobs of a sweep may rewrite the sweep's ``multirun.yaml`` at once) and
    only when something in it is secret.

    Returns:
        Whether the file was rewritten.
    """
    import yaml

    from cts._util.yamlfast import config_yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return False
    if not _holds_secret(text):
        return False
    tree = _redacted_tree(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)), "")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(config_yaml(tree), encoding="utf-8")
    os.replace(temporary, path)
    return True


def _holds_secret(text: str) -> bool:
    """Whether a saved YAML text holds a key: a known value, a secret setting or override given literally."""
    # Not redact(text) != text: its key-look regex costs 10 ms over a job's config.yaml, once per job.
    known = tuple(_KNOWN)
    return any(k in text for k in known) or bool(_YAML_SECRET.search(text) or _OVERRIDE_SECRET.search(text))


def _redacted_tree(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return {k: _redacted_tree(v, f"{name}.{k}") for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redacted_tree(v, name) for v in obj]
    if isinstance(obj, str):
        literal = obj not in _NOT_SECRET and not obj.startswith("${")
        return REDACTED if is_secret_key(name) and literal else redact(obj)
    return obj


class RedactingFilter(logging.Filter):
    """A log handler's filter that masks keys in the message and the traceback (:func:`redact`); passes all."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask ``record`` in place (every later handler sees it masked); always True."""
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is the logging module's to report
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
