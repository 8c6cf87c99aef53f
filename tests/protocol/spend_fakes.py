"""Shared by several test modules (moved out of test_spend.py: no test module imports another)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir

from tests.conftest import REPO
from tests.llm_server import ScriptedServer


def compose_job(tmp_path: Path, cache_dir: Path, server: ScriptedServer, max_usd: float) -> Any:
    overrides = [
        "experiment=offline",
        "clarifier=gpt",
        "limit=8",
        "concurrency=4",
        f"paths.output_dir={tmp_path / 'job'}",
        f"paths.cache_dir={cache_dir}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"services.llm.api_base={server.base_url}",
        f"services.llm.cache.path={tmp_path / 'llm.sqlite'}",
        "services.llm.api_base_price.input_cost_per_token=1e-3",
        "services.llm.max_attempts=1",
        f"services.llm.spend.max_usd={max_usd}",
    ]
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        return compose("config", overrides=overrides)
