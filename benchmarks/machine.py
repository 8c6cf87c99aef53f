"""How fast this machine runs Python right now: a fixed workload's CPU seconds, to read CPU figures by.

The CPU a sweep spends per request varied by 40% on one 2-core VM over a few hours with the
same code. A benchmark prints :func:`reference_cpu_s` before and after its measurement, so a CPU
figure compares across runs (and sessions) in proportion to it: a figure that grows with the
reference is the machine, one that grows alone is the code.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time

_TEXT = "介绍一下行星水星的卫星、轨道和自转周期 Mercury orbit rotation " * 30
_DOC = {"model": "m", "messages": [{"role": "user", "content": f"{_TEXT}{i}"} for i in range(8)], "k": 3}


def _once(rounds: int) -> float:
    """CPU seconds of ``rounds`` rounds of what cts does per request: JSON both ways, a digest, dicts, sorting."""
    start = time.process_time()
    for i in range(rounds):
        text = json.dumps(_DOC, ensure_ascii=False, sort_keys=True)
        value = json.loads(text)
        hashlib.sha256(text.encode("utf-8")).hexdigest()
        sorted(value["messages"], key=lambda m: m["content"][-7:])
        {n: c for n, c in enumerate(text[: 200 + i % 7])}
    return time.process_time() - start


def reference_cpu_s(rounds: int = 5000, repeats: int = 3) -> float:
    """The median CPU seconds of the fixed workload (about 0.3-0.5 s each on a 2-core VM)."""
    return statistics.median(_once(rounds) for _ in range(repeats))


if __name__ == "__main__":
    print(f"machine reference: {reference_cpu_s():.3f} s CPU")
