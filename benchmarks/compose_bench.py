"""Composing the paper grid's 21 job configs, with and without the launch's cache of config files.

    python benchmarks/compose_bench.py [--rounds 5]

Times ``cts.compose.launch.jobs.sweep_job_configs`` for ``clarifier=gpt,ernie,claude,gemini,deepseek,
kimi,qwen k=1,2,3`` (7 full Hydra compositions, 14 jobs made from a sibling), each round with a new
launch memo; "hydra" passes Hydra's loader through unchanged, so every composition reads the
defaults tree's files again. The arms alternate; best wall and CPU seconds of each.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any
from unittest import mock

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode

from cts.compose.launch.jobs import sweep_job_configs
from cts.sweep._compose import ComposedJobs
from cts.sweep._config_files import ConfigFiles

CONF = Path(__file__).resolve().parents[1] / "conf"
PAPER = ["clarifier=gpt,ernie,claude,gemini,deepseek,kimi,qwen", "k=1,2,3"]


def _timed(master: Any, read_once: bool) -> tuple[float, float]:
    hydras_own = mock.patch.object(ConfigFiles, "loader", lambda _files, loader: loader)
    with contextlib.nullcontext() if read_once else hydras_own:
        wall, cpu = time.perf_counter(), time.process_time()
        assert len(sweep_job_configs(master, ComposedJobs())) == 21
        return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    times: dict[str, list[tuple[float, float]]] = {"hydra": [], "read once": []}
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        master = GlobalHydra.instance().config_loader().load_configuration("config", PAPER, run_mode=RunMode.MULTIRUN)
        for _ in range(rounds):
            times["hydra"].append(_timed(master, read_once=False))
            times["read once"].append(_timed(master, read_once=True))
    for arm, runs in times.items():
        print(f"{arm:10s} best {min(w for w, _ in runs):.3f} s wall, {min(c for _, c in runs):.3f} s CPU")


if __name__ == "__main__":
    main()
