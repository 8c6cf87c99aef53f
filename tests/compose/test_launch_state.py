"""A launch's pre-flight results serve its own jobs and end with it: the next launch checks again."""

from __future__ import annotations

from hydra import compose, initialize_config_dir

from cts.compose.launch_state import launch_state, new_launch
from cts.compose.probes import probe_endpoints
from tests.runs import REPO


def _llm_job(base_url: str):  # noqa: ANN202 - DictConfig
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=[f"services.llm.api_base={base_url}", "limit=1"])


def test_an_endpoint_is_probed_once_per_launch_and_again_in_the_next(llm_server) -> None:
    job = _llm_job(llm_server.base_url)
    new_launch()
    probe_endpoints([job, job])
    probe_endpoints([job])  # a job of the same launch: nothing sent again
    assert len(llm_server.gets) == 1 and launch_state().probed
    new_launch()  # the next sweep in this process (a notebook): the endpoint may have died since
    assert not launch_state().probed
    probe_endpoints([job])
    assert len(llm_server.gets) == 2
