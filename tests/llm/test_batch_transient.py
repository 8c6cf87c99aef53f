"""A transient failure is never a result: batch lines that fail with a 5xx, a timeout or expiry.

The UA, rewriter and judge run in the Batch API emulators, whose lines fail with HTTP 500, 504
or expire for about 30% of the requests (the same lines every time they are sent). The sweep
ends incomplete: the instances those lines hit are not recorded, the summary names no rejection,
and the same command against the healthy emulators sends exactly the requests that got no reply,
once each (counted at the emulators), and finishes every instance.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.batch_emulators import EXPIRED, AnthropicBatchEmulator, OpenAIBatchEmulator
from tests.prewarmed import run_script
from tests.provider_emulators import VLLMEmulator
from tests.runs import REPO

KEYS = {"OPENAI_API_KEY": "sk-emulated", "ANTHROPIC_API_KEY": "sk-ant-emulated"}
BATCHED = ("ua", "rewriter", "judge")
FAULTS: dict[int, int | str] = {0: 500, 1: EXPIRED, 2: 504}  # by the request key's value mod 10: ~30% of lines


def flaky(custom_id: str, body: Mapping[str, Any]) -> int | str | None:
    """The same lines fail every time they are sent: a 500, a timeout (504) or expiry."""
    return FAULTS.get(int(custom_id[:8], 16) % 10)


@contextmanager
def emulators(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for key, value in KEYS.items():
        monkeypatch.setenv(key, value)
    with ExitStack() as stack:
        started = {
            "gpt": stack.enter_context(OpenAIBatchEmulator(delay_s=0.2, fault=flaky)),
            "claude": stack.enter_context(AnthropicBatchEmulator(delay_s=0.2, fault=flaky)),
            "webdancer": stack.enter_context(VLLMEmulator()),
        }
        monkeypatch.setenv("WEBDANCER_API_BASE", started["webdancer"].base_url)
        yield started


def command(tmp_path: Path, started: Mapping[str, Any], cache_dir: Path) -> list[str]:
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    for name in ("gpt", "claude"):
        path = conf / "model" / f"{name}.yaml"
        text = re.sub(r"(?m)^api_base: .*$", f"api_base: {started[name].base_url}", path.read_text("utf-8"))
        path.write_text(text, encoding="utf-8")
    return [
        "--config-path",
        str(conf),
        "-m",
        "clarifier=gpt",
        "k=2",
        "ua=gpt",
        "rewriter=gpt",
        "judge=claude",
        "limit=6",
        f"services.llm.batch.roles=[{','.join(BATCHED)}]",
        "services.llm.batch.max_wait_s=0.3",
        "services.llm.batch.poll_s=0.1",
        "services.llm.batch.max_submissions=2",
        "sweep_report=false",  # read by no test here
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"paths.cache_dir={cache_dir}",
        f"services.llm.cache.path={tmp_path}/llm.sqlite",
    ]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    return run_script([str(REPO / "run.py"), *args], cwd=cwd, env=env, timeout=600)


def sent(started: Mapping[str, Any], since: Mapping[str, int] | None = None) -> list[str]:
    """The request lines the Batch APIs were sent (after the first ``since[name]`` batches; a line sent twice is
    there twice)."""
    return [
        cid
        for name in ("gpt", "claude")
        for b in started[name].created_batches[(since or {}).get(name, 0) :]
        for cid in b.custom_ids
    ]


def batches(started: Mapping[str, Any]) -> dict[str, int]:
    return {name: len(started[name].created_batches) for name in ("gpt", "claude")}


def job_files(tmp_path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    (job,) = (tmp_path / "sweep").glob("*/summary.json")
    lines = (job.parent / "records.jsonl").read_text("utf-8").splitlines()
    return [json.loads(line) for line in lines], json.loads(job.read_text("utf-8"))


@pytest.mark.slow
def test_failed_batch_lines_are_not_results_and_a_rerun_sends_exactly_them(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulators(monkeypatch) as started:
        args = command(tmp_path, started, cache_dir)
        first = run(args, tmp_path)
        before, after_first = sent(started), batches(started)
        failed = {cid for cid in before if flaky(cid, {}) is not None}
        answered = set(before) - failed
        records, summary = job_files(tmp_path)
        for name in ("gpt", "claude"):
            started[name].fault = None  # the provider is healthy again
        second = run(args, tmp_path)
        retried, after_second = sent(started, after_first), batches(started)
        fresh = [
            a.replace(str(tmp_path / "sweep"), str(tmp_path / "fresh")).replace("/llm.sqlite", "/fresh.sqlite")
            for a in args
        ]
        assert run(fresh, tmp_path).returncode == 0  # the same sweep from scratch against the healthy provider
        reference = sent(started, after_second)
    rejected = {k: v for k, v in summary.get("unscored", {}).items() if k.endswith("_rejected") and v}
    print(
        f"\nfirst run: exit {first.returncode}, {len(before)} lines sent ({len(answered)} answered, {len(failed)} failed),"
        f" {len(records)} of 6 instances recorded, rejected: {rejected}"
        f"\nrerun: exit {second.returncode}, {len(retried)} lines sent, {len(set(retried) & failed)} of them"
        f" the failed ones, {len(set(retried) - failed)} never sent before;"
        f" from scratch: {len(reference)} lines"
    )
    said = first.stdout + first.stderr
    print("\n".join(line for line in said.splitlines() if "unscored" in line or "infrastructure" in line))
    assert failed and answered, "the faults must hit some lines and spare others"
    assert first.returncode == 1 and "failed on infrastructure" in first.stdout + first.stderr, first.stderr[-3000:]
    assert not rejected and not any(
        (r.get("error") or {}).get("kind") == "api_error" or "batch:" in json.dumps(r) for r in records
    )
    assert len(records) < 6  # the instances the failed lines hit are not recorded ...
    assert second.returncode == 0, second.stderr[-3000:]
    assert (
        failed <= set(retried) and not set(retried) & answered
    )  # ... a rerun sends every failed line, no answered one
    assert len(retried) == len(set(retried))  # each once
    assert set(retried) == set(reference) - answered  # exactly what the first run got no reply for (or never sent)
    records, summary = job_files(tmp_path)
    assert len(records) == 6 and all(r["clarified"]["score"] is not None for r in records)
    assert summary["metrics"]["n_unscored"] == 0
