"""Keys masked by value and by look (#46): error bodies, log lines, Hydra's saved files, resume commands."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
import yaml

from cts._util.interrupt import resume_command
from cts._util.secrets import (
    RedactingFilter,
    masked_overrides,
    redact,
    redact_yaml_file,
    remember,
)
from cts.core.types import CallError, RequestRejected
from cts.llm import LLMRuntime, ModelSpec
from tests.llm_server import Reply, ScriptedServer, llm_settings

KEY = "cts-test-key-0b9c8d7e6f5a4b3c"  # no key pattern matches it: only the remembered value masks it
SPEC = ModelSpec(name="m", id="openai/m-1", api_key_env=None)


def test_remembered_values_and_key_like_text_are_masked() -> None:
    remember(KEY, "short", None, "sk-no-key-needed")
    assert redact(f"upstream rejected key {KEY}.") == "upstream rejected key ***."
    assert redact("Authorization: Bearer abcdefgh12") == "Authorization: Bearer ***"
    assert redact('{"x-api-key": "anything-at-all"}') == '{"x-api-key": "***"}'
    assert redact("bad key sk-proj-Abc123Def456Ghi789Jkl") == "bad key ***"
    assert redact("a=1,services.llm.api_key=abc,b=2") == "a=1,services.llm.api_key=***,b=2"
    kept = "api_key: null; api_key=${oc.env:K}; short; sk-no-key-needed words; 问题 task-sk-like"
    assert redact(kept) == kept  # references, short values, the dummy key and CJK text stay


def test_the_log_filter_masks_message_arguments_and_traceback() -> None:
    remember(KEY)
    try:
        raise ValueError(f"body quoted {KEY}")
    except ValueError:
        import sys

        record = logging.LogRecord("cts.x", logging.WARNING, __file__, 1, "failed with %s", (KEY,), sys.exc_info())
    assert RedactingFilter().filter(record)
    text = logging.Formatter("%(message)s").format(record)
    assert KEY not in text and "failed with ***" in text and "body quoted ***" in text


def test_hydras_files_are_rewritten_with_keys_masked_and_references_kept(tmp_path: Path) -> None:
    remember(KEY)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"services:\n  llm:\n    api_key: {KEY}\n    cache:\n      url: null\nmodel:\n  api_key_env: K\n  x: '1e3'\n"
        "other:\n  api_key: ${oc.env:K}\n  password: hunter2\n  名称: 中文\n",
        encoding="utf-8",
    )
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text(f"- services.llm.api_key={KEY}\n- k=1\n", encoding="utf-8")
    assert redact_yaml_file(config) and redact_yaml_file(overrides)
    assert yaml.safe_load(config.read_text(encoding="utf-8")) == {
        "services": {"llm": {"api_key": "***", "cache": {"url": None}}},
        "model": {"api_key_env": "K", "x": "1e3"},
        "other": {"api_key": "${oc.env:K}", "password": "***", "名称": "中文"},
    }
    assert overrides.read_text(encoding="utf-8") == "- services.llm.api_key=***\n- k=1\n"
    plain = tmp_path / "plain.yaml"
    plain.write_text("services:\n  llm:\n    api_key: null\n    api_key_env: K\n", encoding="utf-8")
    assert not redact_yaml_file(plain)  # nothing secret: left as Hydra wrote it


def test_resume_commands_mask_a_typed_key_and_keep_a_reference(tmp_path: Path) -> None:
    typed = ["services.llm.api_key=abc", "services.llm.cache.url=postgresql://u:pw@h/db", "k=1,2"]
    assert masked_overrides(typed) == [
        "services.llm.api_key=***",
        "services.llm.cache.url=postgresql://u:***@h/db",
        "k=1,2",
    ]
    command = resume_command(["-m", *typed, "services.llm.api_key=${oc.env:K}"], tmp_path, script="run.py")
    assert "abc" not in command and ":pw@" not in command
    assert "services.llm.api_key=***" in command and "'services.llm.api_key=${oc.env:K}'" in command


@pytest.mark.parametrize("transport", ["litellm", "openai"])
@pytest.mark.parametrize("status", [400, 500])
def test_an_error_body_echoing_the_key_is_masked_in_the_calls_error(
    tmp_path: Path, transport: str, status: int
) -> None:
    """A provider quoting the key it was sent: the rejection (400) and the infrastructure failure (500) mask it."""
    body = json.dumps({"error": {"message": f"key {KEY} may not use this model", "type": "x", "param": "model"}})
    with ScriptedServer() as server:
        server.default = Reply(status=status, raw=body)
        runtime = LLMRuntime.from_settings(
            llm_settings(server, api_key=KEY, transport=transport, max_attempts=2), tmp_path
        )
        with pytest.raises((RequestRejected, CallError)) as failed:
            asyncio.run(runtime.client(SPEC, "ua").complete([{"role": "user", "content": "你好?"}]))
        sent = {r.headers.get("authorization") for r in server.requests}
    assert sent == {f"Bearer {KEY}"}
    assert isinstance(failed.value, RequestRejected if status == 400 else CallError)
    assert KEY not in str(failed.value) and "key *** may not use this model" in str(failed.value)
