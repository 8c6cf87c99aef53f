"""Leakage canaries: no text of fused_query reaches the Clarifier or the Rewriter."""

import asyncio
import importlib
import inspect
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cts.core.types import Instance
from cts.protocol.pipeline import Roles, run_instances
from cts.protocol.settings import InstanceSettings, JobSettings
from cts.roles.lexical import LexicalJudge
from cts.roles.rules import RuleClarifier, RuleRewriter, RuleUserAnswerer
from tests.helpers import Spy, TableSearch, Typer, built, gold_for

CONF = Path(__file__).resolve().parents[2] / "conf"
CANARY = "ZQXJV-canary-4417"


def test_fused_query_never_reaches_clarifier_or_rewriter(services, tmp_path):
    insts = [
        Instance("c1", "Tell me about Mercury", f"{CANARY} Tell me about Mercury, the planet"),
        Instance("c2", "Eastern Front", f"({CANARY}) Eastern Front during World War I"),
    ]
    clarifier = Spy(RuleClarifier(order=["scope", "time", "region"]))
    ua = Spy(built(RuleUserAnswerer, services))
    rewriter = Spy(RuleRewriter())
    search = Spy(TableSearch({}))
    roles = Roles(clarifier=clarifier, ua=ua, rewriter=rewriter, search=search, judge=LexicalJudge(), qtyper=Typer())
    asyncio.run(
        run_instances(
            insts,
            {i.id: gold_for(i.id, ("x", 1)) for i in insts},
            roles,
            InstanceSettings(3),
            JobSettings(tmp_path, progress=False),
        )
    )
    assert any(CANARY in s for s in ua.seen), "the canary must be live: the UA does see q*"
    for spy in (clarifier, rewriter, search):
        assert spy.seen and not any(CANARY in s for s in spy.seen)
        assert not any(i.fused_query in s for i in insts for s in spy.seen)


def _targets(group: str) -> list[str]:
    out = []
    for f in sorted((CONF / group).glob("*.yaml")):
        target = OmegaConf.load(f).get("_target_")
        if target:
            out.append(target)
    return out


@pytest.mark.parametrize(("group", "method"), [("clarifier", "ask"), ("rewriter", "rewrite")])
def test_no_role_signature_can_take_the_intent(group, method):
    targets = _targets(group)
    assert targets
    for target in targets:
        mod, _, name = target.rpartition(".")
        fn = getattr(getattr(importlib.import_module(mod), name), method)
        params = set(inspect.signature(fn).parameters) - {"self"}
        assert "blurred_query" in params and not any("fused" in p or "intent" in p for p in params), target
