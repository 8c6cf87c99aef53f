"""The least CPU a tracked paper-grid sweep costs with the required stack, before any work of its own.

    python benchmarks/sweep_floor.py [--tries 3]

Three parts, each measured apart (best of ``--tries``):

- imports: a fresh interpreter importing what a tracked sweep cannot do without (MLflow, Hydra,
  OmegaConf, pandas, SciPy), measured as the child's CPU;
- composing: the 21 job configs of ``clarifier=gpt,ernie,claude,gemini,deepseek,kimi,qwen k=1,2,3``
  (7 Hydra compositions, 14 jobs made from a sibling: ``benchmarks/compose_bench.py``'s measure);
- runs: 21 MLflow runs in a SQLite store made beforehand: each created, given a job's params
  (a composed job config, flattened as a job logs it) and ended. That is what "every job is one
  MLflow run" asks of the store, and nothing more.

Their sum is a floor: a sweep adds its pre-flight, its jobs' set-ups, its requests and its report.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

from compose_bench import CONF, PAPER  # benchmarks/compose_bench.py, beside this script
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from cts.compose.launch.jobs import sweep_job_configs
from cts.sweep._compose import ComposedJobs

REQUIRED = "import mlflow, hydra, omegaconf, pandas, scipy.stats"


def import_cpu() -> float:
    """CPU seconds of a fresh interpreter that imports :data:`REQUIRED` and exits."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", REQUIRED], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compose_cpu(master: Any) -> tuple[float, list[Any]]:
    """CPU seconds of composing the 21 job configs with a new launch memo, and the configs."""
    start = time.process_time()
    configs = sweep_job_configs(master, ComposedJobs())
    assert len(configs) == 21
    return time.process_time() - start, configs


def runs_cpu(params: dict[str, str], n: int = 21) -> float:
    """CPU seconds of ``n`` MLflow runs (create, log ``params``, end) in a SQLite store made first."""
    import logging

    import mlflow

    from cts.tracking import prepare_store

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # its table and experiment creation notes

    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{tmp}/mlflow.db"
        prepare_store(uri)
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment("floor")
        start = time.process_time()
        for i in range(n):
            with mlflow.start_run(run_name=f"job{i}"):
                mlflow.log_params(params)
        return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=3)
    tries = parser.parse_args().tries
    imports = min(import_cpu() for _ in range(tries))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        master = GlobalHydra.instance().config_loader().load_configuration("config", PAPER, run_mode=RunMode.MULTIRUN)
        composed = [compose_cpu(master) for _ in range(tries)]
    from cts.tracking import flatten

    job = OmegaConf.to_container(composed[0][1][0], resolve=False)
    assert isinstance(job, dict)
    job.pop("hydra", None)
    params = flatten({str(k): v for k, v in job.items()})
    runs = min(runs_cpu(params) for _ in range(tries))
    compose = min(c for c, _ in composed)
    print(f"imports ({REQUIRED}): {imports:.2f} s CPU")
    print(f"composing the 21 job configs: {compose:.2f} s CPU")
    print(f"21 MLflow runs ({len(params)} params each): {runs:.2f} s CPU")
    print(f"floor: {imports + compose + runs:.2f} s CPU")


if __name__ == "__main__":
    main()
