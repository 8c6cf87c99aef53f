"""A job's MLflow tags name its system as the report does."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cts.compose.job_config import job_tags
from cts.report.jobs import job_from_summary
from cts.tasks.job import JobContext

GPT = {"clarifier": "gpt", "model@clarifier.model": "gpt"}
"""Hydra's choices of ``clarifier=gpt``: the generated option binds its model by a package override."""


@pytest.mark.parametrize(
    ("choices", "overrides", "swept", "system"),
    [
        (GPT, ("clarifier=gpt", "k=1"), ("clarifier", "k"), "gpt"),
        # A swept rebind of the clarifier's model names the system by the model's option.
        (GPT, ("clarifier=gpt", "model@clarifier.model=claude", "k=1"), ("model@clarifier.model", "k"), "claude"),
        (GPT, ("clarifier=gpt", "model@clarifier.model=claude"), None, "claude"),  # a sweep that recorded no keys
        ({"clarifier": "rules_scope"}, ("clarifier=rules_scope", "judge=lexical"), ("judge",), "rules_scope"),
        ({}, ("clarifier=none",), ("clarifier",), "none"),
    ],
)
def test_the_system_tag_is_the_reports_system(
    choices: dict[str, str], overrides: tuple[str, ...], swept: tuple[str, ...] | None, system: str
) -> None:
    ctx = JobContext(choices, "run", Path("job"), "sweep", overrides, swept)
    tags = job_tags(OmegaConf.create({"k": 1}), ctx)
    summary = {
        "choices": choices,
        "k": 1,
        "overrides": list(overrides),
        "swept": None if swept is None else list(swept),
    }
    assert tags["cts.system"] == job_from_summary(summary, []).system == system
