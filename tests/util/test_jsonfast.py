"""orjson on the request path writes the bytes the standard library wrote: cache keys do not change."""

from __future__ import annotations

import enum
import json
import random
import struct
from pathlib import Path
from typing import Any

import pytest

from cts._util import jsonfast
from cts._util.jsonfast import canonical_json, request_body
from cts.llm.cache import ResponseCache


def _stdlib(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def _request() -> dict[str, Any]:
    return {
        "model": "openai/qwen",
        "messages": [
            {"role": "system", "content": '只回答问题。\nAnswer in one line.\t"quoted" \\ back\u0001slash'},
            {"role": "user", "content": "北京 2019 年 GDP？ 😀 é \u2028 \u007f"},
        ],
        "temperature": 0.7,
        "max_tokens": 512,
        "top_p": 1.0,
        "seed": 0,
        "stop": None,
        "extra": {"z": [1, 2.5, False], "a": {"中": 1, "Z": 2, "é": 3, "😀": 4, "\uffff": 5}},
    }


def test_every_code_point_is_written_as_the_standard_library_writes_it() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    assert canonical_json({"s": text}) == _stdlib({"s": text})


def test_a_request_is_keyed_by_the_same_bytes_through_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    request = _request()
    expected = _stdlib(request)

    def no_stdlib(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("a plain request takes orjson's path")

    monkeypatch.setattr(jsonfast.json, "dumps", no_stdlib)
    assert canonical_json(request) == expected
    assert canonical_json((request, [request])) == _stdlib_unpatched((request, [request]))


def _stdlib_unpatched(obj: Any) -> bytes:
    return json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode(obj).encode()


@pytest.mark.parametrize("seed", range(4))
def test_floats_of_every_magnitude_keep_their_bytes(seed: int) -> None:
    rng = random.Random(seed)
    floats = [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(20_000)]
    floats += [0.0, -0.0, 1e-4, 9.999999999999999e-05, 1e-05, 2.5e-7, 1e16, 1.5e16, 1e308, 5e-324]
    floats += [float("nan"), float("inf"), float("-inf")]
    for f in floats:
        assert canonical_json({"t": f, "l": [f]}) == _stdlib({"t": f, "l": [f]}), f


@pytest.mark.parametrize(
    "value",
    [
        2**64,
        -(2**63) - 1,
        2**63,
        {1: "int key", 2: "b"},
        {None: 1},
        Path("/x/y"),
        Colour.RED,
        Level.HIGH,
        {"set": {1, 2}},
        ("tuple", ["in", ("list",)]),
        [True, False, None, 0, -1],
    ],
)
def test_what_orjson_writes_otherwise_goes_to_the_standard_library(value: Any) -> None:
    assert canonical_json(value) == _stdlib(value)
    assert canonical_json({"v": value}) == _stdlib({"v": value})


def test_the_cache_key_is_the_digest_of_the_standard_librarys_bytes() -> None:
    import hashlib

    request = _request()
    assert ResponseCache.key(request) == hashlib.sha256(_stdlib(request)).hexdigest()


def test_the_request_body_is_the_same_json_value() -> None:
    request = _request()
    assert json.loads(request_body(request)) == request
    big = {"n": 2**70, "text": "中文"}
    assert json.loads(request_body(big)) == big


def test_a_line_holds_the_value_json_writes_and_falls_back_where_orjson_would_change_it() -> None:
    from cts._util.jsonfast import json_line

    request = {**_request(), "latency_s": 1.25e-05, "score": 0.5, "order": {"b": 1, "a": 2}}
    line = json_line(request)
    assert "\n" not in line and json.loads(line) == request
    assert list(json.loads(line)["order"]) == ["b", "a"]  # insertion order unless sorted
    assert json_line(request, sort_keys=True) == _stdlib(request).decode().replace("1.25e-05", "0.0000125")
    for odd in ({"nan": float("nan")}, {"when": Path("/x")}, {"colour": Colour.RED}, {"big": 2**70}):
        assert json_line(odd) == json.dumps(odd, ensure_ascii=False, default=str)
