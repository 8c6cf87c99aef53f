"""No key in anything a run writes (#46): a key typed on the command line, a key a provider echoes back.

Each test runs ``run.py`` against a provider emulator on 127.0.0.1, then greps every byte the run
left (the job and sweep dirs with ``.hydra/``, the MLflow SQLite store and its artifacts dir, the
logs, records, ``infra_failures.jsonl``, the response cache) and its console for a canary key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.prewarmed import run_script
from tests.provider_emulators import OpenAIEmulator, Refusal, Seen

REPO = Path(__file__).resolve().parents[2]
CANARY = "cts-canary-5f1e9d3c7a2b4e6f"  # no key pattern matches it: only the remembered value masks it
KEY_VAR = "CTS_TEST_ECHOED_KEY"


class EchoingProvider(OpenAIEmulator):
    """An OpenAI-compatible provider that answers the User Answerer's calls with a 500 quoting the key it got."""

    def answer(self, seen: Seen) -> dict[str, Any]:
        if "Clarification question:" in json.dumps(seen.body, ensure_ascii=False):
            key = seen.headers.get("authorization", "").removeprefix("Bearer ")
            raise Refusal(500, {"error": {"message": f"upstream rejected key {key}", "type": "server_error"}})
        return super().answer(seen)


@pytest.fixture
def provider() -> Iterator[EchoingProvider]:
    with EchoingProvider() as emulator:
        yield emulator  # type: ignore[misc]


def run(
    tmp_path: Path, cache_dir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``run.py args`` from ``tmp_path`` (MLflow's artifacts dir lands there), its store and LLM cache in it."""
    return run_script(
        [
            str(REPO / "run.py"),
            *args,
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"paths.cache_dir={cache_dir}",  # the shared index and demo set; the response cache below
            f"services.llm.cache.path={tmp_path / 'llm_cache.sqlite'}",
            "services.llm.backoff.initial=0.01",
            "services.llm.backoff.jitter=0.01",
        ],
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", **(env or {})},
    )


def files_with(secret: str, *roots: Path, since: float = 0.0) -> list[str]:
    """Every file under ``roots`` (changed since ``since``) whose bytes contain ``secret``."""
    needle = secret.encode()
    found = []
    for root in roots:
        for path in [root, *root.rglob("*")] if root.is_dir() else [root]:
            if path.is_file() and path.stat().st_mtime >= since and needle in path.read_bytes():
                found.append(str(path))
    return found


def written(tmp_path: Path) -> set[str]:
    """The names of what a run wrote under ``tmp_path`` (the test's proof that the grep saw them)."""
    return {p.name for p in tmp_path.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_a_key_typed_on_the_command_line_is_nowhere_the_sweep_wrote(tmp_path: Path, cache_dir: Path) -> None:
    start = time.time() - 1
    with OpenAIEmulator() as emulator:
        proc = run(
            tmp_path,
            cache_dir,
            "-m",
            "experiment=offline",
            "ua=ernie",
            "k=1,2",
            "limit=2",
            f"services.llm.api_base={emulator.base_url}",  # type: ignore[attr-defined]
            f"services.llm.api_key={CANARY}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        )
        sent = [s.headers.get("authorization") for s in emulator.requests if s.method == "POST"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sent and set(sent) == {f"Bearer {CANARY}"}  # the key was used: the run had it to leak
    names = written(tmp_path)
    assert {"overrides.yaml", "hydra.yaml", "config.yaml", "multirun.yaml", "sweep.json", "run.log"} <= names
    assert {"records.jsonl", "summary.json", "mlflow.db", "llm_cache.sqlite"} <= names
    assert any((tmp_path / "artifacts").rglob("*.json")), names  # the MLflow store's artifacts dir, searched too
    assert files_with(CANARY, tmp_path, cache_dir, since=start) == []
    assert CANARY not in proc.stdout + proc.stderr
    assert proc.stderr.count("warning: services.llm.api_key given on the command line") == 1
    overrides = (tmp_path / "sweep" / "k=1" / ".hydra" / "overrides.yaml").read_text(encoding="utf-8")
    assert "services.llm.api_key=***" in overrides  # masked, not dropped


@pytest.mark.slow
def test_a_key_the_provider_echoes_in_an_error_body_is_nowhere_the_run_wrote(
    tmp_path: Path, cache_dir: Path, provider: EchoingProvider
) -> None:
    """The issue's case: the completion pre-flight off, the key read from the variable a model names."""
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "echoing.yaml").write_text(
        "_target_: cts.llm.ModelSpec\nname: echoing\nid: openai/echoing-1\n"
        f"api_base: {provider.base_url}\napi_key_env: {KEY_VAR}\n",
        encoding="utf-8",
    )
    start = time.time() - 1
    proc = run(
        tmp_path,
        cache_dir,
        "experiment=offline",
        "ua=echoing",
        "limit=2",
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
        "services.llm.preflight_completion=false",
        "services.llm.max_attempts=2",
        f"hydra.run.dir={tmp_path / 'job'}",
        env={KEY_VAR: CANARY},
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # every instance failed on the endpoint
    assert any(CANARY in json.dumps(body) for _, body in provider.refusals)  # the provider did echo it
    assert files_with(CANARY, tmp_path, cache_dir, since=start) == []
    assert CANARY not in proc.stdout + proc.stderr
    failures = (tmp_path / "job" / "infra_failures.jsonl").read_text(encoding="utf-8")
    assert "upstream rejected key ***" in failures  # the provider's message kept, the key masked
    assert "upstream rejected key ***" in (tmp_path / "job" / "run.log").read_text(encoding="utf-8")
