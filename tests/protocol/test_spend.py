"""Spend limit and cost truth, end to end over real HTTP: the app's evaluate task against the local server.

Every request costs 0.01 USD (10 prompt tokens at 1e-3, priced through
``services.llm.api_base_price``), so the server's request count is the ground
truth of what was paid.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from cts import tracking
from cts.core.records import read_records
from cts.protocol.spend import SPEND_FILE, unrecorded_usage
from tests.conftest import REPO
from tests.llm_fakes import protocol_reply
from tests.llm_server import Reply, ScriptedServer
from tests.protocol.spend_fakes import compose_job

PER_CALL = 0.01


def run(tmp_path: Path, cache_dir: Path, server: ScriptedServer, max_usd: float) -> dict[str, Any]:
    from cts.compose.app import build_services, run_configured_task

    cfg = compose_job(tmp_path, cache_dir, server, max_usd)
    run_configured_task(cfg, build_services(cfg))
    return json.loads((tmp_path / "job" / "summary.json").read_text())


def latest_run(tmp_path: Path) -> Any:
    runs = tracking.search_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    return runs.sort_values("start_time").iloc[-1]


def test_a_spend_limit_stop_is_marked_paid_calls_counted_and_cap_holds_across_resumes(
    tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arrivals = itertools.count()

    def reply(body: Any) -> Reply:
        # The first call spends the cap; it lands once the three others are on the wire (however
        # loaded the machine), and they land after it.
        if next(arrivals) == 0:
            deadline = time.monotonic() + 60
            while len(server.requests) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            return Reply(protocol_reply(body), tokens_in=10, tokens_out=0)
        return Reply(protocol_reply(body), tokens_in=10, tokens_out=0, delay_s=0.5)

    with ScriptedServer() as server:
        server.handler = reply
        summary = run(tmp_path, cache_dir, server, max_usd=PER_CALL)
        paid = len(server.requests) * PER_CALL
        assert len(server.requests) == 4  # concurrency 4: the three slow calls were in flight
        m = summary["metrics"]
        assert summary["stop_reason"] == "spend_limit"
        assert "STOPPED BY THE LLM SPEND LIMIT: 7 of 8 instances have no record" in capsys.readouterr().out
        assert m["n_instances"] == 1 and m["n_planned"] == 8 and m["n_missing"] == 7
        assert m["cost_usd"] == pytest.approx(PER_CALL)  # the one record
        assert m["cost_unrecorded_usd"] == pytest.approx(3 * PER_CALL)  # paid, in flight at the stop
        assert m["cost_total_usd"] == pytest.approx(paid)
        # the ledger books the requests and tokens behind that USD too (what the planner's actuals add)
        assert unrecorded_usage(tmp_path / "job") == pytest.approx(
            {"requests": 3, "tokens_in": 30, "tokens_out": 0, "tokens_reasoning": 0, "usd": 3 * PER_CALL}
        )
        run_ = latest_run(tmp_path)
        assert run_["tags.stop_reason"] == "spend_limit" and run_["metrics.n_missing"] == 7
        assert run_["metrics.cost_total_usd"] == pytest.approx(paid)

        # The same cap again: the dir has spent it, so nothing more is sent.
        summary = run(tmp_path, cache_dir, server, max_usd=PER_CALL)
        assert len(server.requests) == 4
        # Replies paid at the first stop were cached, so instances they serve may finish for free
        # before the first uncached call stops the job again: how many is a race, not a cost.
        m = summary["metrics"]
        assert summary["stop_reason"] == "spend_limit" and 1 <= m["n_missing"] <= 7
        assert m["n_instances"] + m["n_missing"] == 8 and m["cost_total_usd"] == pytest.approx(paid)
        assert latest_run(tmp_path)["tags.stop_reason"] == "spend_limit"

        # A higher cap finishes the job; the total stays the truth over all runs.
        summary = run(tmp_path, cache_dir, server, max_usd=1.0)
        m = summary["metrics"]
        assert summary["stop_reason"] == "done" and m["n_missing"] == 0 and m["n_instances"] == 8
        assert len(server.requests) == 8  # each instance's call paid once: the late replies were cached
        assert m["cost_total_usd"] == pytest.approx(8 * PER_CALL)
        assert latest_run(tmp_path)["tags.stop_reason"] == "done"
    assert len(list(read_records(tmp_path / "job" / "records.jsonl"))) == 8
    assert (tmp_path / "job" / SPEND_FILE).exists()
