"""Shared by several test modules (moved out of test_infra_failures.py: no test module imports another)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from cts.compose.services import Services
from cts.core.records import Record
from cts.core.types import Instance
from cts.protocol.pipeline import Roles, run_instances
from cts.protocol.settings import InstanceSettings, JobSettings
from cts.roles.lexical import LexicalJudge
from cts.roles.llm import LLMClarifier
from cts.roles.rules import RuleRewriter, RuleUserAnswerer
from tests.helpers import TableSearch, Typer, built, gold_for
from tests.llm_server import ScriptedServer, llm_settings

SPEC = {"name": "m", "id": "openai/m", "api_base": None, "api_key_env": None}


QUESTIONS = '["Which planet or element do you mean?"]'


def instances(n: int) -> list[Instance]:
    return [Instance(f"i{j}", f"Tell me about Mercury {j}", f"Tell me about Mercury {j}, the planet") for j in range(n)]


def llm_roles(server: ScriptedServer, tmp_path: Path, core: Services, **llm: Any) -> Roles:
    """An LLM clarifier on the scripted server; everything else offline."""
    services = Services(cache_dir=tmp_path / "cache", settings={"llm": llm_settings(server, **llm)})
    return Roles(
        clarifier=built(LLMClarifier, services, model=SPEC, prompt="clarifier"),
        ua=built(RuleUserAnswerer, core),
        rewriter=RuleRewriter(),
        search=TableSearch({}),
        judge=LexicalJudge(),
        qtyper=Typer(),
    )


def job(tmp_path: Path, insts: list[Instance], roles: Roles, concurrency: int = 4) -> tuple[list[Record], str]:
    gold = {i.id: gold_for(i.id, ("Mercury is a planet", 1)) for i in insts}
    return asyncio.run(
        run_instances(
            insts,
            gold,
            roles,
            InstanceSettings(1),
            JobSettings(tmp_path / "job", concurrency=concurrency, progress=False),
        )
    )
