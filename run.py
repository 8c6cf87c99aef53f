"""cts entry point: `python run.py [-m] [group=option ...]` (see README)."""

import os
from pathlib import Path

import hydra
from omegaconf import DictConfig

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Compose the config and run the configured task; returns the sweep metric."""
    from cts.app import run

    return run(cfg)


if __name__ == "__main__":
    main()
