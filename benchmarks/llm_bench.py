"""Throughput benchmark of the LLM layer against the local scripted server.

Runs N instances' worth of protocol calls (clarifier, UA, rewriter, judge: four
calls per instance at k=1) through the real roles and runtime, cache off,
against ``tests/llm_fakes.py`` started in a subprocess with a fixed per-call
latency, and prints the achieved wall time against the ideal
``calls x latency / concurrency`` and the framework's CPU time per call::

    python benchmarks/llm_bench.py --n 200 --concurrency 32 --latency-ms 200 [--transport openai]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from cts.compose.services import Services, component_arguments
from cts.core.types import QA, Nugget
from cts.roles.llm import LLMClarifier, LLMJudge, LLMRewriter, LLMUserAnswerer

FAKES = Path(__file__).resolve().parents[1] / "tests" / "llm_fakes.py"
"""The scripted OpenAI-compatible server (run in a subprocess with a fixed latency)."""

SPEC = {
    "name": "bench",
    "id": "openai/bench-model",
    "params": {"temperature": 0},
    "input_cost_per_token": 1e-7,
    "output_cost_per_token": 4e-7,
}
NUGGETS = tuple(Nugget(f"n{i}", f"fact number {i} about the topic", 3 - i % 3) for i in range(1, 4))


@dataclass(frozen=True)
class BenchResult:
    """Figures of one benchmark run."""

    calls: int
    wall_s: float
    ideal_s: float
    cpu_s: float

    @property
    def efficiency(self) -> float:
        """Ideal over achieved wall time (1.0 = the latency-bound optimum)."""
        return self.ideal_s / self.wall_s

    @property
    def cpu_ms_per_call(self) -> float:
        """Framework CPU time per call, in milliseconds."""
        return 1000 * self.cpu_s / self.calls


def _services(base_url: str, concurrency: int, cache_dir: Path, transport: str = "openai") -> Services:
    llm = {
        "api_base": base_url,
        "cache": {"mode": "off"},
        "concurrency_per_endpoint": concurrency,
        "timeout_s": 30,
        "max_attempts": 3,
        "transport": transport,
    }
    return Services(cache_dir=cache_dir, settings={"llm": llm})


T = TypeVar("T")


def built(target: type[T], services: Services, **config: object) -> T:
    """``target`` as the composition layer builds it (a chat client for ``model``)."""
    return target(**component_arguments(target, config, services))


async def _run(n: int, concurrency: int, services: Services) -> int:
    clarifier = built(LLMClarifier, services, model=SPEC, prompt="clarifier")
    ua, rewriter = (
        built(LLMUserAnswerer, services, model=SPEC, prompt="ua"),
        built(LLMRewriter, services, model=SPEC, prompt="rewriter"),
    )
    judge = built(LLMJudge, services, model=SPEC, prompt="judge")

    async def instance(i: int) -> None:
        blurred, fused = f"best universities for AI #{i}", f"best universities for AI in Europe #{i}"
        (question,) = await clarifier.ask(blurred, 1)
        answer = await ua.answer(fused, question)
        query = await rewriter.rewrite(blurred, [QA(question, answer)])
        await judge.judge(f"An answer to {query} with fact number 1 about the topic", NUGGETS)

    await asyncio.gather(*(instance(i) for i in range(n)))
    return int(sum(row["requests"] for row in services.llm.usage().values()))


def run_bench(n: int, concurrency: int, latency_ms: float, transport: str = "openai") -> BenchResult:
    """Start the server in a subprocess, run the calls, return the figures."""
    cmd = [sys.executable, str(FAKES), "--latency-ms", str(latency_ms), "--protocol"]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            services = _services(base_url, concurrency, Path(tmp), transport)
            asyncio.run(_run(1, concurrency, services))  # warm-up: imports, connections
            services = _services(base_url, concurrency, Path(tmp), transport)
            wall, cpu = time.perf_counter(), time.process_time()
            calls = asyncio.run(_run(n, concurrency, services))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        server.terminate()
        server.wait(timeout=10)
    return BenchResult(calls, wall, calls * latency_ms / 1000 / concurrency, cpu)


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="LLM-layer throughput against the local scripted server")
    parser.add_argument("--n", type=int, default=200, help="instances (4 calls each)")
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight per endpoint")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="server latency per call")
    parser.add_argument(
        "--transport",
        choices=["litellm", "openai"],
        default="openai",
        help="services.llm.transport to measure",
    )
    args = parser.parse_args()
    r = run_bench(args.n, args.concurrency, args.latency_ms, args.transport)
    print(f"calls={r.calls} concurrency={args.concurrency} latency={args.latency_ms:g}ms transport={args.transport}")
    print(f"wall={r.wall_s:.2f}s ideal={r.ideal_s:.2f}s efficiency={r.efficiency:.3f} (target >= 0.85)")
    print(f"framework cpu={r.cpu_s:.2f}s = {r.cpu_ms_per_call:.2f} ms/call")


if __name__ == "__main__":
    main()
