"""Repeats: the repeat index in the LLM and tool cache keys (repeat 0 keeps today's), sampling per repeat."""

from __future__ import annotations

import asyncio
import collections
import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cts.core.records import Record
from cts.core.types import Gold, Instance, SearchResult
from cts.llm import LLMRuntime, ModelSpec, ResponseCache, current_sample, sample_scope
from cts.protocol.design import Design
from cts.protocol.metrics import summarize
from cts.protocol.pipeline import Roles, run_instances
from cts.protocol.settings import InstanceSettings, JobSettings, OrigShare
from cts.roles.lexical import LexicalJudge
from cts.roles.llm import LLMClarifier, LLMRewriter, LLMUserAnswerer
from cts.search.toolcache import ToolCache, search_args, visit_args
from cts.stats import Resampling
from tests.helpers import Typer, gold_for
from tests.llm_fakes import protocol_reply
from tests.llm_server import ScriptedServer, llm_settings
from tests.runs import run_py

SPEC = ModelSpec("ernie", "openai/ernie-4.5-turbo-128k", params={"temperature": 0})
MESSAGES = [{"role": "user", "content": "Which region?"}]
# Keys the tool cache wrote before repeats existed (computed with the code of the commit before them).
OLD_SEARCH_KEY = "96ee95241436b628c9e5fff9f1f4f812e1fc7f94dae936459111bc3dc4350149"
OLD_VISIT_KEY = "6204e10d111607f7b54ff23196210cce592690801f825804d6a894b402ff50c5"


def runtime(server: ScriptedServer, path: Path) -> LLMRuntime:
    return LLMRuntime.from_settings(llm_settings(server, cache={"mode": "read_write", "path": str(path)}), path.parent)


def call(rt: LLMRuntime) -> Any:
    return asyncio.run(rt.client(SPEC, "ua").complete(MESSAGES, prompt_version="v1"))


def in_scope(repeat: int, temperature: float | None, work: Any) -> Any:
    with sample_scope(repeat, temperature):
        return work()


def test_tool_cache_keys_at_repeat_0_are_the_keys_written_before_repeats():
    cache = ToolCache(Path("unused.sqlite"), "off")
    with sample_scope(0, temperature=0.7):
        assert cache.key("bm25:en-us", "search", search_args("Mercury moons", 10)) == OLD_SEARCH_KEY
        assert cache.key("local", "visit", visit_args("local://Mercury", "moons", 8000)) == OLD_VISIT_KEY
    assert cache.key("bm25:en-us", "search", search_args("Mercury moons", 10)) == OLD_SEARCH_KEY  # no scope
    with sample_scope(1):
        one = cache.key("bm25:en-us", "search", search_args("Mercury moons", 10))
    with sample_scope(2):
        two = cache.key("bm25:en-us", "search", search_args("Mercury moons", 10))
    assert len({OLD_SEARCH_KEY, one, two}) == 3


def test_llm_key_at_repeat_0_is_today_s_and_an_existing_cache_still_hits(llm_server, tmp_path, monkeypatch):
    seen: list[dict[str, Any]] = []
    plain = ResponseCache.key
    monkeypatch.setattr(ResponseCache, "key", staticmethod(lambda obj: seen.append(obj) or plain(obj)))
    path = tmp_path / "cache.sqlite"
    call(runtime(llm_server, path))  # a cache written as every job before repeats wrote it
    assert len(llm_server.requests) == 1
    assert set(seen[0]) == {"api_base", "model", "messages", "params", "prompt_version"}
    assert in_scope(0, 0.9, lambda: call(runtime(llm_server, path))).cached  # repeat 0: served, no request
    assert len(llm_server.requests) == 1 and seen[1] == seen[0]
    assert not in_scope(1, None, lambda: call(runtime(llm_server, path))).cached  # repeat 1: its own sample
    assert in_scope(1, None, lambda: call(runtime(llm_server, path))).cached  # ... cached under its own key
    assert len(llm_server.requests) == 2 and seen[2] == {**seen[0], "repeat": 1}


def test_repeat_temperature_applies_past_repeat_0_only(llm_server, tmp_path):
    path = tmp_path / "cache.sqlite"
    in_scope(0, 0.8, lambda: call(runtime(llm_server, path)))
    in_scope(1, 0.8, lambda: call(runtime(llm_server, path)))
    in_scope(2, None, lambda: call(runtime(llm_server, path)))
    temps = [r.body.get("temperature") for r in llm_server.requests]
    assert temps == [0, 0.8, 0]  # the registry's temperature unless repeat_temperature is set (repeat > 0)


def test_the_scope_reaches_tasks_started_inside_and_ends_with_the_block():
    async def inner() -> int:
        return current_sample().repeat

    async def outer() -> tuple[int, int]:
        with sample_scope(3):
            task = asyncio.ensure_future(inner())
        return await task, current_sample().repeat

    assert asyncio.run(outer()) == (3, 0)


@pytest.mark.parametrize("repeat", [0, 1])
def test_sample_scope_drops_the_temperature_at_repeat_0(repeat):
    with sample_scope(repeat, 0.7) as sample:
        assert sample.temperature == (0.7 if repeat else None)


# ----------------------------------------------------------------- a job, repeated, over the scripted server

INTENTS = {"mercury": "the planet", "jaguar": "the animal", "java": "the island", "python": "the snake"}
FACTS = {
    "mercury": ("Mercury is the first planet from the Sun", "Mercury is a chemical element"),
    "jaguar": ("The jaguar is a large cat of the Americas", "Jaguar is a British car maker"),
    "java": ("Java is an island of Indonesia", "Java is a programming language"),
    "python": ("Pythons are snakes that constrict their prey", "Python is a programming language"),
}


def instances() -> list[Instance]:
    return [Instance(n, f"Tell me about {n}", f"Tell me about {n}, {intent}") for n, intent in INTENTS.items()]


def gold() -> dict[str, Gold]:
    return {n: gold_for(n, (FACTS[n][0], 2), (f"{n} facts", 1)) for n in INTENTS}


class CachedSearch:
    """Answers from the facts table (the intent's fact when the query names it) through a tool cache."""

    def __init__(self, path: Path) -> None:
        self.cache, self.computed, self.queries = ToolCache(path), 0, []

    async def search(self, query: str) -> SearchResult:
        self.queries.append(query)

        async def compute() -> dict[str, Any]:
            self.computed += 1
            name = query.split()[3].strip(",").lower()
            hit = any(w in query for w in ("planet", "animal", "island", "snake"))
            return {"answer": FACTS[name][0 if hit else 1]}

        value, _ = await self.cache.get_or_compute("facts", "search", search_args(query, 1), compute)
        return SearchResult(answer=value["answer"], evidence=(), trace=(), summary={"calls": 1})


def noisy_reply(rng: random.Random) -> Any:
    """A stochastic fake model: the UA states the intent with probability 0.3, else ``unknown``
    (so at k=2 an instance is found with probability 0.51: the chance that all 4 instances agree
    over 4 repeats, leaving no spread to measure, is below 0.001)."""

    def reply(body: dict[str, Any]) -> str:
        user = next(str(m["content"]) for m in body["messages"] if m["role"] == "user")
        if m := re.search(r"^Number of questions:\s*(\d+)", user, re.MULTILINE):
            return json.dumps(["Which sense do you mean?", "Which aspect of it?", "For what purpose?"][: int(m[1])])
        if m := re.search(r"^Intent query:\s*(.+)$", user, re.MULTILINE):
            return m[1].split(", ", 1)[1] if rng.random() < 0.3 else "unknown"
        if "Clarification questions and answers:" in user:
            original = re.search(r"^Original query:\s*(.+)$", user, re.MULTILINE)[1]
            known = [a for a in re.findall(r"^A\d+:\s*(.+)$", user, re.MULTILINE) if a != "unknown"]
            return f"{original} ({', '.join(known)})" if known else original
        return "ok"

    return reply


def llm_roles(server: ScriptedServer, tmp_path: Path) -> Roles:
    rt = runtime(server, tmp_path / "llm_cache.sqlite")
    return Roles(
        clarifier=LLMClarifier(rt.client(SPEC, "clarifier"), "clarifier"),
        ua=LLMUserAnswerer(rt.client(SPEC, "ua"), "ua"),
        rewriter=LLMRewriter(rt.client(SPEC, "rewriter"), "rewriter"),
        search=CachedSearch(tmp_path / "tool_cache.sqlite"),
        judge=LexicalJudge(),
        qtyper=Typer(),
    )


def repeated(
    server: ScriptedServer, tmp_path: Path, design: Design, k: int = 2, orig_share: OrigShare | None = None
) -> tuple[list[Record], Roles]:
    roles = llm_roles(server, tmp_path)
    settings = InstanceSettings(k, design, orig_share)
    records, stop = asyncio.run(
        run_instances(instances(), gold(), roles, settings, JobSettings(tmp_path / "job", progress=False))
    )
    assert stop == "done"
    return records, roles


def kinds(server: ScriptedServer, start: int = 0) -> collections.Counter[str]:
    """Requests since ``start`` by the prompt they carry."""
    labels = {"Number of questions:": "clarifier", "Intent query:": "ua", "Original query:": "rewriter"}
    found: collections.Counter[str] = collections.Counter()
    for r in server.requests[start:]:
        user = next(str(m["content"]) for m in r.body["messages"] if m["role"] == "user")
        found.update(name for label, name in labels.items() if label in user)
    return found


def test_repeats_3_then_a_rerun_sends_nothing_and_repeats_4_only_the_new_repeat(llm_server, tmp_path):
    llm_server.handler = noisy_reply(random.Random(0))
    first, roles = repeated(llm_server, tmp_path, Design(repeats=3))
    n, k = len(INTENTS), 2
    assert kinds(llm_server) == {"clarifier": 3 * n, "ua": 3 * n * k, "rewriter": 3 * n}
    assert sorted((r.id, r.repeat) for r in first) == sorted((i, rep) for i in INTENTS for rep in range(3))
    lines = [json.loads(x) for x in (tmp_path / "job" / "records.jsonl").read_text().splitlines()]
    assert sorted(line.get("repeat", 0) for line in lines) == [0] * n + [1] * n + [2] * n  # 0: left out, as before
    traces = [json.loads(x) for x in (tmp_path / "job" / "traces.jsonl").read_text().splitlines()]
    runs = {(t["id"], t.get("repeat", 0)) for t in traces if t["arm"] == "instance"}  # each repeat's own traces
    assert runs == {(i, rep) for i in INTENTS for rep in range(3)} and len(traces) == len({*map(json.dumps, traces)})
    assert all("repeat" not in t for t in traces if t.get("repeat", 0) == 0)  # repeat 0's lines are as before
    assert roles.search.computed >= 3 * n  # each repeat searched orig afresh (the tool cache key has the repeat)

    sent = len(llm_server.requests)
    again, roles = repeated(llm_server, tmp_path, Design(repeats=3))
    assert len(llm_server.requests) == sent and roles.search.computed == 0 and len(again) == 3 * n

    more, roles = repeated(llm_server, tmp_path, Design(repeats=4))
    assert kinds(llm_server, sent) == {"clarifier": n, "ua": n * k, "rewriter": n}  # repeat 3 only
    assert len(more) == 4 * n and {r.repeat for r in more} == {0, 1, 2, 3}
    assert 0 < roles.search.computed <= 2 * n  # repeat 3's orig and clarified searches, no more

    metrics = summarize(more, k=k, resampling=Resampling(200))
    assert metrics["n_instances"] == n and metrics["repeats"] == 4 and metrics["n_records"] == 4 * n
    scores = {i: [r.score for r in more if r.id == i] for i in INTENTS}
    assert metrics["score_mean"] == pytest.approx(np.mean([np.mean(s) for s in scores.values()]))
    sds = [np.std(s, ddof=1) for s in scores.values()]
    assert metrics["score_within_sd"] == pytest.approx(np.mean(sds)) and metrics["score_within_sd"] > 0
    assert 0.0 <= metrics["score_icc"] <= 1.0 and metrics["orig_within_sd"] == 0.0  # orig is deterministic here


def test_repeat_temperature_reaches_the_requests_of_repeats_past_0(llm_server, tmp_path):
    llm_server.handler = noisy_reply(random.Random(1))
    repeated(llm_server, tmp_path, Design(repeats=2, temperature=0.9), k=1)
    by_repeat = collections.Counter(r.body.get("temperature") for r in llm_server.requests)
    assert by_repeat == {0: 3 * len(INTENTS), 0.9: 3 * len(INTENTS)}


def test_re_sampling_one_stage_replays_every_other_stage_from_the_cache(llm_server, tmp_path):
    llm_server.handler = noisy_reply(random.Random(2))
    records, _ = repeated(llm_server, tmp_path, Design(repeats=4, stages=("ua",)))
    n, k = len(INTENTS), 2
    sent = kinds(llm_server)
    assert sent["clarifier"] == n and sent["ua"] == 4 * n * k  # the clarifier's questions: repeat 0's, replayed
    assert n <= sent["rewriter"] <= 4 * n  # a rewrite is new only when the answers it gets are
    assert all(r.resampled == ("ua",) for r in records)
    assert len({r.questions for r in records if r.id == "java"}) == 1


def test_attribution_arms_decompose_the_delta_and_only_the_oracle_searches_the_intent(llm_server, tmp_path):
    llm_server.handler = noisy_reply(random.Random(3))
    records, roles = repeated(llm_server, tmp_path, Design(arms=("oracle", "withheld", "prefix")), k=3)
    intents = {i.fused_query for i in instances()}
    assert sorted(q for q in roles.search.queries if q in intents) == sorted(intents)  # once each: oracle
    rewriter_prompts = [r.body for r in llm_server.requests if kinds_of(r) == "rewriter"]
    assert rewriter_prompts and not any(q in json.dumps(b) for b in rewriter_prompts for q in intents)
    for r in records:
        assert set(r.arms) == {"oracle", "withheld", "prefix_1", "prefix_2"}
        assert r.arms["oracle"].query in intents and r.arms["withheld"].query == r.orig.query  # all unknown: q itself
    m = summarize(records, k=3, resampling=Resampling(200))
    deltas = [r.score - r.orig_score for r in records]
    assert m["delta_mean"] == pytest.approx(np.mean(deltas))
    # Independent checks: the two parts add up to the delta, and so do the marginal values of the questions.
    assert m["delta_rewrite_mean"] + m["delta_answers_mean"] == pytest.approx(m["delta_mean"])
    assert sum(m[f"marginal_q{i}_mean"] for i in (1, 2, 3)) == pytest.approx(m["delta_mean"])
    assert m["delta_oracle_mean"] == pytest.approx(np.mean([r.arms["oracle"].score - r.orig_score for r in records]))


def kinds_of(request: Any) -> str:
    user = next(str(m["content"]) for m in request.body["messages"] if m["role"] == "user")
    return "rewriter" if "Original query:" in user else ""


def test_the_oracle_arm_is_shared_across_jobs_as_orig_is(llm_server, tmp_path):
    llm_server.handler = noisy_reply(random.Random(4))
    done: dict[str, Any] = {}

    async def share(key: str, work: Any) -> Any:
        if key not in done:
            done[key] = await work()
        return done[key]

    design = Design(arms=("oracle",))
    _, a = repeated(llm_server, tmp_path / "a", design, k=1, orig_share=share)
    _, b = repeated(llm_server, tmp_path / "b", design, k=2, orig_share=share)
    intents = {i.fused_query for i in instances()}
    assert [q for q in b.search.queries if q in intents] == []  # job b reused job a's oracle arms
    assert sorted(k for k in done if "|oracle" in k) == sorted(f"{i}|oracle" for i in INTENTS)
    assert set(INTENTS) <= set(done)  # orig at repeat 0 keeps its key: the instance id


# ----------------------------------------------------------------- the same through run.py (every LLM role on the server)


def demo_reply(rng: random.Random | None) -> Any:
    """:func:`llm_fakes.protocol_reply` with a UA that states the intent's extra words (with probability 0.6
    when ``rng`` is given, else always) and a rewriter that appends the known answers to the query."""

    def reply(body: dict[str, Any]) -> str:
        user = next((str(m["content"]) for m in body.get("messages", []) if m.get("role") == "user"), "")
        if "<tools>" not in user and (m := re.search(r"^Intent query:\s*(.+)$", user, re.MULTILINE)):
            extra = re.split(r",\s*(?:the\s+)?|\s+in\s+", m[1].rstrip(". "), maxsplit=1)
            known = len(extra) == 2 and (rng is None or rng.random() < 0.6)
            return extra[1] if known else "unknown"
        if "<tools>" not in user and "Clarification questions and answers:" in user:
            original = re.search(r"^Original query:\s*(.+)$", user, re.MULTILINE)[1].rstrip(". ")
            known = [a for a in re.findall(r"^A\d+:\s*(.+)$", user, re.MULTILINE) if a.strip() != "unknown"]
            return ", ".join([original, *known])
        return protocol_reply(body)

    return reply


@pytest.mark.slow
def test_run_py_repeats_3_rerun_sends_nothing_and_repeats_4_sends_one_repeat_s_requests(
    tmp_path, llm_server, cache_dir
):
    llm_server.handler = demo_reply(None)  # deterministic: every repeat sends the same requests
    for part in ("index", "demo"):  # built once per session; the tool cache starts cold
        if (cache_dir / part).is_dir():
            shutil.copytree(cache_dir / part, tmp_path / "cache" / part)
    common = (
        "clarifier=ernie",
        "k=2",
        "limit=3",
        f"services.llm.api_base={llm_server.base_url}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={tmp_path}/cache",
        f"services.llm.cache.path={tmp_path}/llm_cache.sqlite",
        f"hydra.run.dir={tmp_path}/job",
        "judge_anchors.check=false",  # a scripted judge: the anchor check (docs/judges.md) would refuse it before the run
    )
    run_py(*common, "repeats=3", cwd=tmp_path)
    first = [r.body for r in llm_server.requests]
    probes = [b for b in first if "Number of questions:" not in json.dumps(b) and kinds_of_body(b) == ""]
    run_py(*common, "repeats=3", cwd=tmp_path)
    assert len(llm_server.requests) == len(first)  # the rerun is served from the caches
    run_py(*common, "repeats=4", cwd=tmp_path)
    new = [r.body for r in llm_server.requests[len(first) :]]
    assert new and 3 * len(new) == len(first) - len(probes), (len(first), len(probes), len(new))
    metrics = json.loads((tmp_path / "job" / "summary.json").read_text())["metrics"]
    assert metrics["repeats"] == 4 and metrics["n_records"] == 12 and metrics["n_instances"] == 3
    assert metrics["tool_cache_misses"] > 0  # repeat 3 searched afresh (its tool cache keys carry the index)
    lines = [json.loads(x) for x in (tmp_path / "job" / "records.jsonl").read_text().splitlines()]
    assert sorted(line.get("repeat", 0) for line in lines) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]


def kinds_of_body(body: dict[str, Any]) -> str:
    text = json.dumps(body)
    labels = (
        "Number of questions:",
        "Intent query:",
        "Original query:",
        "<tools>",
        "User Goal",
        "Nuggets:",
        "Evidence snippets:",
    )
    return next((label for label in labels if label in text), "")


def test_the_fingerprint_ignores_repeats_and_the_design_keys_at_their_defaults():
    from hydra import compose, initialize_config_dir

    from cts.compose.job_config import protocol_config, protocol_fingerprint
    from tests.conftest import REPO

    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose("config", overrides=["experiment=offline"])
        base = protocol_fingerprint(cfg)
        assert not {"repeats", "repeat_temperature", "repeat_stages", "arms"} & set(protocol_config(cfg))
        assert protocol_fingerprint(compose("config", overrides=["experiment=offline", "repeats=4"])) == base
        for o in ("arms=[oracle]", "repeat_temperature=0.7", "repeat_stages=ua"):
            assert protocol_fingerprint(compose("config", overrides=["experiment=offline", o])) != base, o


def test_design_of_config_values():
    assert Design.of(3, None, "clarifier,ua", ["oracle"]) == Design(3, None, ("clarifier", "ua"), ("oracle",))
    assert Design.of(1, "0.7", None, None).temperature == 0.7
    with pytest.raises(ValueError, match="repeat_stages"):
        Design.of(2, None, "planner")
    with pytest.raises(ValueError, match="repeats"):
        Design.of(0)
    d = Design(repeats=3, stages=("search",))
    assert [d.repeat_of(s, 2) for s in ("clarifier", "search", "judge")] == [0, 2, 0]
    assert d.share_key("i1", 0) == "i1" and d.share_key("i1", 2) == "i1|r2.0"  # orig at repeat 0: today's key
    assert Design().share_key("i1", 2, "oracle") == "i1|oracle|r2.2"
    assert Design().share_key("i1", 1, "withheld", "q") == Design().share_key("i1", 1, "prefix_1", "q")
