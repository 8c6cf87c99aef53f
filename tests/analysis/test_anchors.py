"""Anchor probes: an empty answer must score 0, the gold nuggets' own text 100; the pre-flight stops a judge that fails.

The judges over HTTP are scripted servers reading the judge's real prompt: one labels a nugget full when
its text is in the answer (it passes), one labels by position, whatever the answer (it fails, as
SmolLM2-135M did on the local preset).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from cts._util.launch import Preflight
from cts.analysis.anchors import AnchorLimits, anchor_answer, anchor_problems, anchor_rows, anchor_scores
from cts.compose.anchor_check import check_anchors, llm_judge_paths
from cts.core.errors import PreflightFailed
from cts.core.types import Gold, Label, Nugget
from cts.roles.lexical import LexicalJudge
from cts.stats import Resampling
from tests.llm_server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
GOLD = {
    "a": Gold("a", (Nugget("n1", "The bridge opened in 1932", 2), Nugget("n2", "It spans Sydney Harbour", 1))),
    "c": Gold("c", (Nugget("n1", "长城始建于春秋战国时期", 1), Nugget("n2", "明朝大规模重修", 3))),
}


class Positional:
    """The first nugget full, the rest none, whatever the answer."""

    async def judge(self, answer: str, nuggets: Sequence[Nugget]) -> dict[str, Label]:
        return {n.id: ("full" if i == 0 else "none") for i, n in enumerate(nuggets)}


def test_the_lexical_judge_passes_both_anchors_exactly_in_english_and_chinese() -> None:
    assert (
        anchor_answer("gold", GOLD["c"]) == "长城始建于春秋战国时期\n明朝大规模重修"
        and anchor_answer("empty", GOLD["a"]) == ""
    )
    rows = anchor_rows(asyncio.run(anchor_scores(GOLD, LexicalJudge())), Resampling(200)).set_index("probe")
    assert rows.loc["empty", ["score", "score_ci_low", "score_ci_high"]].tolist() == [0.0, 0.0, 0.0]
    assert rows.loc["gold", ["score", "score_ci_low", "score_ci_high"]].tolist() == [100.0, 100.0, 100.0]
    assert anchor_problems(rows.reset_index(), AnchorLimits(0.0, 100.0)) == []  # even at the strictest limits


def test_a_judge_that_labels_by_position_fails_both() -> None:
    rows = anchor_rows(asyncio.run(anchor_scores(GOLD, Positional())), Resampling(200))
    by = rows.set_index("probe")["score"]
    assert by["empty"] == pytest.approx((100 * 2 / 3 + 100 * 1 / 4) / 2) and by["gold"] == by["empty"]
    assert anchor_problems(rows, AnchorLimits()) == [
        "an empty answer scored 45.83, at most 10 allowed",
        "the gold nuggets' own text scored 45.83, at least 90 needed",
    ]


def by_text(body: dict[str, Any]) -> str:
    """A judge that reads the prompt: full where the nugget's text is in the candidate answer."""
    prompt = body["messages"][-1]["content"]
    answer = prompt.split("Candidate answer:\n", 1)[1].split("\n\nNuggets:\n", 1)[0]
    nuggets = re.findall(r"^(n\d+): (.+)$", prompt.split("\n\nNuggets:\n", 1)[1], re.MULTILINE)
    return json.dumps({n: ("full" if text in answer else "none") for n, text in nuggets})


def by_position(body: dict[str, Any]) -> str:
    nuggets = re.findall(r"^(n\d+): ", body["messages"][-1]["content"].split("Nuggets:\n", 1)[1], re.MULTILINE)
    return json.dumps({n: ("full" if i == 0 else "none") for i, n in enumerate(nuggets)})


def job(server: ScriptedServer, tmp_path: Path, *extra: str) -> Any:
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose(
            "config",
            overrides=[
                "experiment=offline",
                "judge=ernie",
                f"services.llm.api_base={server.base_url}",
                f"paths.cache_dir={tmp_path}",
                *extra,
            ],
        )


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QIANFAN_API_KEY", "test-key")


def test_the_pre_flight_passes_a_judge_that_reads_the_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ScriptedServer() as server:
        server.handler = by_text
        cfg = job(server, tmp_path)
        memo = Preflight()
        check_anchors([cfg, cfg], memo)
        check_anchors([cfg], memo)
        assert len(server.requests) == 6  # 3 instances x 2 anchors, once for the two jobs and once per launch
    err = capsys.readouterr().err
    assert "cts pre-flight: anchor check of judge ernie: 6 judge calls on 3 instance(s)" in err
    assert "cts pre-flight: judge ernie anchors: empty 0.00 [0.00, 0.00], gold 100.00 [100.00, 100.00]" in err


def test_the_pre_flight_stops_a_judge_that_labels_by_position_in_one_error_line(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        server.handler = by_position
        with pytest.raises(PreflightFailed) as stopped:
            check_anchors([job(server, tmp_path, "judge_anchors.instances=2")])
        assert len(server.requests) == 4
    message = stopped.value.message
    assert "\n" not in message and message.startswith(
        "error: judge ernie fails the anchor check: an empty answer scored"
    )
    assert message.endswith("or set judge_anchors.check=false")


def test_an_offline_judge_or_a_check_turned_off_calls_nothing(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        server.handler = by_position
        offline = job(server, tmp_path, "judge=lexical")
        assert llm_judge_paths(offline) == []
        check_anchors([offline, job(server, tmp_path, "judge_anchors.check=false")])
        assert server.requests == []
