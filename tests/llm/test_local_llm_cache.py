"""A local LLM server's calls are cached by what it serves (model file and settings), not by its port."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from cts.compose.services import Services, local_llm_served
from cts.llm import LocalLLMServer, ModelSpec
from tests.llm_server import ScriptedServer, llm_settings

SPEC = ModelSpec("smollm2", "openai/smollm2-135m", params={"temperature": 0})
MESSAGES = [{"role": "user", "content": "哪个地区？ Which region?"}]


@dataclass(frozen=True)
class Served(LocalLLMServer):
    """The local server's config, its process replaced by a scripted server already listening."""

    base_url: str = ""

    @contextlib.contextmanager
    def serve(self, job_dir: Path, cache_dir: Path) -> Iterator[str]:
        yield self.base_url


def requests_sent(tmp_path: Path, server: Served) -> tuple[int, int]:
    """One call through a fresh job's local server on a fresh port: (requests it got, its port)."""
    with ScriptedServer() as fake:
        fake.handler = lambda body: "亚洲"
        llm = {**llm_settings(fake, tmp_path), "api_base": None}  # the local server's, as a job has it
        served = replace(server, base_url=fake.base_url)
        with local_llm_served(Services(tmp_path, {"llm": llm}), served, tmp_path / "job") as services:
            reply = asyncio.run(services.llm.client(SPEC, "ua").complete(MESSAGES))
        assert reply.text == "亚洲"
        return len(fake.requests), int(fake.base_url.rsplit(":", 1)[1].split("/")[0])


def test_a_rerun_on_another_port_is_served_from_the_cache_and_another_model_is_not(tmp_path: Path) -> None:
    (tmp_path / "a.gguf").write_bytes(b"GGUF model a")
    (tmp_path / "b.gguf").write_bytes(b"GGUF model b")
    a = Served(model_path=str(tmp_path / "a.gguf"), served_name="smollm2-135m")
    first, port = requests_sent(tmp_path, a)
    again, other_port = requests_sent(tmp_path, a)
    assert (first, again) == (1, 0) and other_port != port
    b = replace(a, model_path=str(tmp_path / "b.gguf"))  # the same model id, another file
    assert requests_sent(tmp_path, b)[0] == 1
    assert requests_sent(tmp_path, replace(a, chat_format="chatml"))[0] == 1  # the same file, other replies
