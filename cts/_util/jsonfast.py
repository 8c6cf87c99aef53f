"""JSON on the hot paths: orjson where it writes what the standard library wrote, else ``json``.

Each request sent costs two encodings of its messages (the cache key, the request body);
with CJK text ``json.dumps(..., ensure_ascii=False)`` takes about 65 us for a 17 kB WebDancer
turn, orjson about 1 us. Cache keys must not change (a stored response is found by its key),
so :func:`canonical_json` uses orjson only for values whose encoding is the same byte for byte
(``tests/util/test_jsonfast.py`` checks every code point, floats and key orders), and ``json``
for anything else. The job's records and traces (:func:`json_line`, a line per instance) hold
the same values as before, written compactly.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

_SMALLEST_PLAIN_FLOAT = 1e-4
"""Below this (and above 0) Python writes ``1e-05`` and orjson ``0.00001``."""
_INT_RANGE = (-(2**63), 2**64)
"""orjson's integers (a wider one raises there)."""


def canonical_json(obj: Any) -> bytes:
    """``json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)`` as UTF-8."""
    if _same_in_orjson(obj):
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")


def request_body(payload: Any) -> bytes:
    """The JSON a request posts (compact, UTF-8): the same value as ``json.dumps(payload)``."""
    try:
        return orjson.dumps(payload)
    except (TypeError, orjson.JSONEncodeError):  # e.g. an integer beyond 64 bits: json writes it
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def json_line(obj: Any, *, sort_keys: bool = False) -> str:
    """One JSON line of ``obj`` (no newline) holding the value ``json.dumps(obj, ensure_ascii=False)`` writes.

    Plain JSON values go through orjson (compact: no blank after ``,`` and ``:``, and a float
    in its shortest form, ``0.00001`` for ``1e-05``: the same number); anything else (a NaN,
    which orjson would write as null, a type ``json`` writes with ``default=str``) through
    ``json`` as before.
    """
    if _same_in_orjson(obj, any_float=True):
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS if sort_keys else 0).decode("utf-8")
    return json.dumps(obj, ensure_ascii=False, sort_keys=sort_keys, default=str)


def _same_in_orjson(obj: Any, any_float: bool = False) -> bool:
    """Whether ``obj`` holds only what orjson and ``json`` write alike (exact JSON types, str keys, plain floats).

    ``any_float``: finite floats of any size count (the same number, if not the same digits).
    """
    smallest = 0.0 if any_float else _SMALLEST_PLAIN_FLOAT
    todo = [obj]
    while todo:
        x = todo.pop()
        t = type(x)
        if t is str or t is bool or x is None:
            continue
        if t is dict:
            if any(type(k) is not str for k in x):
                return False
            todo.extend(x.values())
        elif t is list or t is tuple:
            todo.extend(x)
        elif t is int:
            if not _INT_RANGE[0] <= x < _INT_RANGE[1]:
                return False
        elif t is float:
            if not math.isfinite(x) or (x != 0.0 and abs(x) < smallest):
                return False
        else:
            return False
    return True
