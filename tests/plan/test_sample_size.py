"""``python -m cts.plan <sweep dir> --delta 2 --power 0.8`` over a pilot sweep's records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cts.plan.cli import main
from cts.stats.power import Variance, detectable_effect, instances_needed


def write_job(sweep: Path, name: str, pairs: list[tuple[float, float]], usd: float = 0.01) -> None:
    job = sweep / name
    job.mkdir(parents=True)
    (job / "summary.json").write_text("{}")
    lines = [
        json.dumps(
            {
                "id": f"q{i}",
                "k": 1,
                "clarified": {"query": "x", "score": a},
                "orig": {"query": "q", "score": b},
                "usage": {"clarifier": {"requests": 1, "cost_usd": usd}},
            }
        )
        for i, (a, b) in enumerate(pairs)
    ]
    (job / "records.jsonl").write_text("\n".join(lines) + "\n")


def test_cli_prints_mde_needed_instances_and_their_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(3)
    orig = rng.uniform(20, 80, 40)
    clarified = orig + rng.normal(3, 10, 40)
    write_job(tmp_path / "sweep", "clarifier=a,k=1", list(zip(clarified.tolist(), orig.tolist())))
    assert main([str(tmp_path / "sweep"), "--delta", "2", "--power", "0.8"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| clarifier=a"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    var = Variance(float(np.var(clarified - orig, ddof=1)), n=40)
    need = instances_needed(2.0, var)
    assert cells[1] == "40" and float(cells[7]) == pytest.approx(detectable_effect(40, var), abs=0.01)
    assert int(cells[8]) == need
    assert cells[9].startswith(f"${(need - 40) * 0.01:.4f}")  # the extra instances at the pilot's USD each
    assert main([str(tmp_path / "empty"), "--delta", "2"]) == 1


def test_repeats_and_clusters_in_the_records_enter_the_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Records that carry ``repeat`` and ``cluster`` (other versions add them): variance components and ICC."""
    rng = np.random.default_rng(5)
    job = tmp_path / "sweep" / "clarifier=b,k=2"
    job.mkdir(parents=True)
    (job / "summary.json").write_text("{}")
    lines = []
    for i in range(60):
        true = 3 + rng.normal(0, 4) + (i // 6) % 3  # 10 clusters of 6
        for rep in range(2):
            orig = float(rng.uniform(20, 80))
            rec = {
                "id": f"q{i}",
                "k": 2,
                "repeat": rep,
                "cluster": f"c{i // 6}",
                "usage": {},
                "clarified": {"query": "x", "score": orig + true + float(rng.normal(0, 6))},
                "orig": {"query": "q", "score": orig},
            }
            lines.append(json.dumps(rec))
    (job / "records.jsonl").write_text("\n".join(lines) + "\n")
    assert main([str(tmp_path / "sweep"), "--delta", "2"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| clarifier=b"))
    assert row.split("|")[2].strip() == "60" and row.split("|")[3].strip() == "2"  # 60 instances, 2 repeats each
    note = next(line for line in out.splitlines() if line.startswith("clarifier=b,k=2: instances for 2 with"))
    needed = [int(part.rsplit(": ", 1)[1]) for part in note.split(" with ", 1)[1].split(", ")]
    assert needed == sorted(needed, reverse=True) and needed[0] > needed[-1]  # more repeats, fewer instances


def test_a_clustered_job_names_its_clusters_in_its_summary_and_the_planner_reads_them(tmp_path: Path) -> None:
    """A job run with ``dataset.cluster_field`` keeps each instance's cluster in summary.json (``ci``), not its records."""
    from cts.plan.sample_size import sample_size

    rng = np.random.default_rng(11)
    topic = {f"q{i}": f"t{i // 8}" for i in range(48)}  # 6 topics of 8, a strong topic effect
    effect = {f"t{t}": rng.normal(0, 8) for t in range(6)}
    orig = rng.uniform(20, 80, 48)
    pairs = [(o + 3 + effect[topic[f"q{i}"]] + rng.normal(0, 2), o) for i, o in enumerate(orig)]
    write_job(tmp_path / "plain", "clarifier=a,k=1", [(float(a), float(b)) for a, b in pairs])
    write_job(tmp_path / "clustered", "clarifier=a,k=1", [(float(a), float(b)) for a, b in pairs])
    ci = {"ci": {"method": "cluster_bootstrap", "cluster_field": "topic", "clusters": topic}}
    (tmp_path / "clustered" / "clarifier=a,k=1" / "summary.json").write_text(json.dumps(ci))
    plain = sample_size(tmp_path / "plain" / "clarifier=a,k=1", 2.0)
    clustered = sample_size(tmp_path / "clustered" / "clarifier=a,k=1", 2.0)
    assert clustered.needed > plain.needed  # the same deltas need more instances once their topics are known


def test_a_job_dir_of_an_older_version_is_read_in_today_s_names(tmp_path: Path) -> None:
    """The job's ``.hydra/config.yaml`` (the models it calls) names keys and ``_target_`` paths renamed since."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from cts.plan.sample_size import sample_size

    unpriced = ["clarifier.model.input_cost_per_token=null", "clarifier.model.output_cost_per_token=null"]
    with initialize_config_dir(config_dir=str(Path(__file__).parents[2] / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=offline", "clarifier=gpt", *unpriced])
    today = OmegaConf.to_container(cfg)
    assert isinstance(today, dict)
    old = {**today, "task": {"_target_": "cts.app.evaluate_task"}}  # the names of the first days
    model = {("model" if k == "id" else k): v for k, v in today["clarifier"]["model"].items()}
    old["clarifier"] = {**today["clarifier"], "model": model}
    old["services"] = {
        **today["services"],
        "llm": {("budget" if k == "spend" else k): v for k, v in today["services"]["llm"].items()},
    }
    pairs = [(50.0 + i % 7, 48.0 + i % 5) for i in range(30)]
    for name, config in (("today", today), ("old", old)):
        write_job(tmp_path / name, "clarifier=gpt,k=1", pairs)
        (tmp_path / name / "clarifier=gpt,k=1" / ".hydra").mkdir()
        OmegaConf.save(OmegaConf.create(config), tmp_path / name / "clarifier=gpt,k=1" / ".hydra" / "config.yaml")
    found = [sample_size(tmp_path / name / "clarifier=gpt,k=1", 2.0) for name in ("today", "old")]
    assert found[0].unpriced == found[1].unpriced == ("gpt",) and found[0] == found[1]
