"""Batch mode end to end: the card's sweep with its UA, rewriter and judge in the providers' Batch APIs.

GPT answers on :class:`OpenAIBatchEmulator` (files + batches), Claude on
:class:`AnthropicBatchEmulator` (Message Batches), ERNIE (a clarifier, no Batch API) and the
WebDancer server live. A batched line is answered by the same code as the live route, so the
sweep must score exactly as the live one; what differs is where the requests go and their price.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from cts import tracking
from cts.compose.completion_probe import PROBE_TOKENS
from tests.batch_emulators import AnthropicBatchEmulator, OpenAIBatchEmulator
from tests.provider_emulators import QianfanEmulator, VLLMEmulator
from tests.runs import REPO, run_py

CONF = REPO / "conf"
KEYS = {"OPENAI_API_KEY": "sk-emulated", "ANTHROPIC_API_KEY": "sk-ant-emulated", "QIANFAN_API_KEY": "bce-v3/emulated"}
CARD = ("clarifier=gpt,ernie,claude", "k=1,2,3", "ua=gpt", "rewriter=gpt", "judge=claude", "limit=3")
BATCHED = ("ua", "rewriter", "judge")
BATCH = (
    "services.llm.batch.roles=[ua,rewriter,judge]",
    "services.llm.batch.max_wait_s=0.5",
    "services.llm.batch.poll_s=0.2",
)
LEDGER = "llm_batches.jsonl"
ROLE_PROMPTS = {  # the opening words of each batched role's system prompt (prompts/<role>.md)
    "ua": "You are the User Answerer",
    "rewriter": "You are the Rewriter",
    "judge": "You are a strict judge of answer coverage",
}


@contextmanager
def emulators(monkeypatch: pytest.MonkeyPatch, **batch: Any) -> Iterator[dict[str, Any]]:
    """The card's providers on loopback, the batch ones with ``batch`` (delay, expiry, failures)."""
    for key, value in KEYS.items():
        monkeypatch.setenv(key, value)
    with ExitStack() as stack:
        started = {
            "gpt": stack.enter_context(OpenAIBatchEmulator(**batch)),
            "claude": stack.enter_context(AnthropicBatchEmulator(**batch)),
            "ernie": stack.enter_context(QianfanEmulator()),
            "webdancer": stack.enter_context(VLLMEmulator()),
        }
        monkeypatch.setenv("WEBDANCER_API_BASE", started["webdancer"].base_url)
        yield started


def routed_conf(tmp_path: Path, started: dict[str, Any]) -> Path:
    """A copy of ``conf/`` with GPT, Claude and ERNIE at their emulators (the primary config dir)."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    for name in ("gpt", "ernie", "claude"):
        path = conf / "model" / f"{name}.yaml"
        routed, n = re.subn(r"(?m)^api_base: .*$", f"api_base: {started[name].base_url}", path.read_text("utf-8"))
        assert n == 1, name
        path.write_text(routed, encoding="utf-8")
    return conf


def sweep_args(tmp_path: Path, conf: Path, cache_dir: Path, *overrides: str) -> list[str]:
    return [
        "--config-path",
        str(conf),
        "-m",
        *CARD,
        *overrides,
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={cache_dir}",
        f"services.llm.cache.path={tmp_path}/llm.sqlite",
        "sweep_report=false",  # read by no test here (tests/plugins/test_report_job.py and others do)
        "judge_anchors.check=false",  # a scripted judge: the anchor check (docs/judges.md) would refuse it before the run
    ]


def jobs_of(tmp_path: Path) -> Any:
    runs = tracking.search_runs(f"sqlite:///{tmp_path}/mlflow.db")
    return runs[runs["tags.cts.kind"] == "job"].set_index(["tags.cts.system", "params.k"]).sort_index()


def requests_by_role(sweep: Path) -> dict[str, float]:
    """Requests each role sent (the records' usage rows: a batched call counts none of its own)."""
    found: dict[str, float] = {}
    for records in sorted(sweep.glob("*/records.jsonl")):
        for line in records.read_text("utf-8").splitlines():
            for role, row in (json.loads(line).get("usage") or {}).items():
                found[role] = found.get(role, 0.0) + float(row.get("requests", 0.0))
    return found


def scores(sweep: Path) -> dict[tuple[str, str], tuple[Any, Any]]:
    """(job dir, instance) -> (clarified score, orig score), from every job's records."""
    found = {}
    for records in sorted(sweep.glob("*/records.jsonl")):
        for line in records.read_text("utf-8").splitlines():
            r = json.loads(line)
            found[records.parent.name, r["id"]] = (r["clarified"]["score"], r["orig"]["score"])
    return found


def live_role_posts(started: dict[str, Any]) -> dict[str, int]:
    """Live requests each batched role sent (its system prompt in the body; pre-flight probes left out)."""
    counts = dict.fromkeys(BATCHED, 0)
    live = [("gpt", "/v1/chat/completions"), ("claude", "/v1/messages")]  # not the batch routes under them
    bodies = [s.body for name, path in live for s in started[name].requests if s.method == "POST" and s.path == path]
    for body in bodies:
        if body.get("max_completion_tokens", body.get("max_tokens")) == PROBE_TOKENS:
            continue
        text = json.dumps(body)
        for role, opening in ROLE_PROMPTS.items():
            counts[role] += opening in text
    return counts


@pytest.fixture(scope="module")
def card_runs(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Iterator[dict[str, Any]]:
    """The card's sweep live, then batched (each with its own cache and emulators)."""
    out: dict[str, Any] = {}
    for mode, extra in (("live", ()), ("batch", BATCH)):
        tmp_path = tmp_path_factory.mktemp(mode)
        with pytest.MonkeyPatch.context() as monkeypatch, emulators(monkeypatch, delay_s=0.3) as started:
            t0 = time.monotonic()
            run_py(*sweep_args(tmp_path, routed_conf(tmp_path, started), cache_dir, *extra), cwd=tmp_path)
            out[mode] = {
                "wall_s": time.monotonic() - t0,
                "jobs": jobs_of(tmp_path),
                "scores": scores(tmp_path / "sweep"),
                "requests": requests_by_role(tmp_path / "sweep"),
                "live_posts": live_role_posts(started),
                "batches": {name: list(started[name].created_batches) for name in ("gpt", "claude")},
                "ledger": tmp_path / "sweep" / LEDGER,
            }
    yield out


@pytest.mark.slow
@pytest.mark.xdist_group("batch_card")
def test_the_batched_card_sweep_scores_as_the_live_one(card_runs: dict[str, Any]) -> None:
    live, batch = card_runs["live"], card_runs["batch"]
    for run in (live, batch):
        jobs = run["jobs"]
        assert len(jobs) == 9 and set(jobs["status"]) == {"FINISHED"}, jobs["status"]
        assert (jobs["metrics.n_unscored"] == 0).all() and (jobs["metrics.n_errors"] == 0).all()
    assert batch["scores"] == live["scores"] and len(live["scores"]) == 27  # 9 jobs x 3 instances
    assert list(batch["jobs"]["metrics.score_mean"]) == list(live["jobs"]["metrics.score_mean"])


@pytest.mark.slow
@pytest.mark.xdist_group("batch_card")
def test_batched_roles_send_no_live_request_and_cost_half(card_runs: dict[str, Any]) -> None:
    live, batch = card_runs["live"], card_runs["batch"]
    assert live_role_posts_are(live, nonzero=True) and live_role_posts_are(batch, nonzero=False)
    lj, bj = live["jobs"], batch["jobs"]
    for role in BATCHED:
        assert batch["requests"][role] == 0 and live["requests"][role] > 0, role
        for tokens in ("tokens_in", "tokens_out"):
            # over the sweep: which job sends a request its siblings share depends on timing
            assert bj[f"metrics.{tokens}_{role}"].sum() == lj[f"metrics.{tokens}_{role}"].sum() > 0, (role, tokens)
        ratio = bj[f"metrics.cost_usd_{role}"].sum() / lj[f"metrics.cost_usd_{role}"].sum()
        assert ratio == pytest.approx(0.5, rel=1e-9), role
    assert bj["metrics.cost_usd_clarifier"].sum() == pytest.approx(
        lj["metrics.cost_usd_clarifier"].sum()
    )  # live stays live
    sizes = {name: [b.size for b in found] for name, found in batch["batches"].items()}
    assert all(sizes.values()) and not any(live["batches"].values()), sizes
    print(f"\nbatches: {sizes}; wall live {live['wall_s']:.1f} s, batched {batch['wall_s']:.1f} s")


def live_role_posts_are(run: dict[str, Any], nonzero: bool) -> bool:
    posts = run["live_posts"]
    return all(posts[role] > 0 for role in BATCHED) if nonzero else all(posts[role] == 0 for role in BATCHED)


@pytest.mark.slow
@pytest.mark.xdist_group("batch_card")
def test_every_batch_is_in_the_ledger_and_ended(card_runs: dict[str, Any]) -> None:
    from cts.llm.batch._ledger import Ledger

    batch = card_runs["batch"]
    entries = Ledger(batch["ledger"].parent).entries().values()
    created = {b.id for found in batch["batches"].values() for b in found}
    assert {e.batch_id for e in entries} == created and all(e.ended for e in entries)
    assert "openai-sk" not in batch["ledger"].read_text() and "sk-ant" not in batch["ledger"].read_text()


# --- SIGKILL with batches in flight, then the resume -----------------------------------------------------------


def start_sweep(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    return subprocess.Popen(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def submitted_lines(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    return sum('"event": "submitted"' in line for line in ledger.read_text("utf-8").splitlines())


@pytest.mark.slow
def test_sigkill_with_batches_in_flight_then_resume_sends_nothing_twice(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulators(monkeypatch, delay_s=10**6) as started:  # nothing ends while the first process lives
        args = sweep_args(tmp_path, routed_conf(tmp_path, started), cache_dir, *BATCH)
        ledger = tmp_path / "sweep" / LEDGER
        proc = start_sweep(args, tmp_path)
        deadline = time.monotonic() + 240
        while submitted_lines(ledger) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(1.0)  # more requests queue up behind the open batches
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        before = {b.id: set(b.custom_ids) for name in ("gpt", "claude") for b in started[name].created_batches}
        assert len(before) >= 2
        for name in ("gpt", "claude"):
            started[name].delay_s = 0.3  # the provider finishes the batches while nobody polls
        run_py(*args, cwd=tmp_path)
        batches = [b for name in ("gpt", "claude") for b in started[name].created_batches]
        posts, jobs = live_role_posts(started), jobs_of(tmp_path)
        # every reply is in the response cache: the same sweep into a new dir sends nothing to the Batch APIs
        again = [
            a.replace(f"hydra.sweep.dir={tmp_path / 'sweep'}", f"hydra.sweep.dir={tmp_path / 'again'}") for a in args
        ]
        run_py(*again, cwd=tmp_path)
        assert [b for name in ("gpt", "claude") for b in started[name].created_batches] == batches
        assert live_role_posts(started) == posts
    ids = [cid for b in batches for cid in b.custom_ids]
    assert len(ids) == len(set(ids)), "a request was submitted twice"
    assert all(set(b.custom_ids) == before[b.id] for b in batches if b.id in before)
    assert len(jobs) == 9 and set(jobs["status"]) == {"FINISHED"} and (jobs["metrics.n_unscored"] == 0).all()
    for records in (tmp_path / "sweep").glob("*/records.jsonl"):
        seen = [json.loads(line)["id"] for line in records.read_text("utf-8").splitlines()]
        assert len(seen) == len(set(seen)) == 3, records  # every instance once
    print(f"\n{len(before)} batches in flight at the kill, {len(batches)} in all, {len(ids)} requests")


# --- Table 9: re-judging finished runs, entirely in batch ------------------------------------------------------


@pytest.mark.slow
def test_table_9_rejudging_runs_entirely_in_batch(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "source"
    run_py(
        "-m",
        "experiment=offline",
        "clarifier=rules_scope,none",
        "k=1",
        "limit=6",
        "sweep_report=false",
        f"hydra.sweep.dir={source}",
        f"tracking.uri=sqlite:///{tmp_path}/source.db",
        f"paths.cache_dir={cache_dir}",
        cwd=tmp_path,
    )
    found: dict[str, Any] = {}
    for mode, extra in (("live", ()), ("batch", ("services.llm.batch.roles=[judge]", *BATCH[1:]))):
        where = tmp_path / mode
        where.mkdir()
        with emulators(monkeypatch, delay_s=0.3) as started:
            run_py(
                "--config-path",
                str(routed_conf(where, started)),
                "experiment=judge_robustness",
                f"robustness.source={source}",
                "+judge@robustness.judges.gpt=gpt",
                "+judge@robustness.judges.claude=claude",
                "concurrency=64",
                f"hydra.run.dir={where / 'job'}",
                f"tracking.uri=sqlite:///{where}/mlflow.db",
                f"paths.cache_dir={cache_dir}",
                f"services.llm.cache.path={where}/llm.sqlite",
                *extra,
                cwd=where,
            )
            found[mode] = {
                "scores": (where / "job" / "judge_scores.csv").read_text("utf-8"),
                "posts": live_role_posts(started)["judge"],
                "batches": [b.size for name in ("gpt", "claude") for b in started[name].created_batches],
            }
    live, batch = found["live"], found["batch"]
    assert batch["scores"] == live["scores"] and live["scores"].count("\n") > 10
    assert live["posts"] > 0 and batch["posts"] == 0 and not live["batches"]
    assert sum(batch["batches"]) == live["posts"], (batch["batches"], live["posts"])  # every judge call, batched once
    print(f"\nTable 9 in batch: {len(batch['batches'])} batches of {batch['batches']} requests")
