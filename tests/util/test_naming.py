"""Jobs are named by the swept factors only: no routing, no paths, one directory level."""

from __future__ import annotations

from pathlib import Path

import pytest

from cts._util import naming
from cts._util.naming import job_name, swept_keys


def test_swept_keys_are_the_sweep_overrides_only() -> None:
    overrides = [
        "clarifier=gpt,ernie",
        "k=range(1,4)",
        "services.llm.api_base=http://127.0.0.1:8080/v1",
        "dataset.gold_path=/data/gold/gold.jsonl",
        "seed=choice(0,1)",
        "limit=5",
    ]
    assert swept_keys(overrides) == ("clarifier", "k", "seed")


def test_job_name_keeps_the_swept_factors_and_is_one_path_segment() -> None:
    job = [
        "clarifier=gpt",
        "k=2",
        "services.llm.api_base=http://127.0.0.1:8080/v1",
        "dataset.gold_path=/data/gold/gold.jsonl",
    ]
    assert job_name(job, ("clarifier", "k")) == "clarifier=gpt,k=2"
    assert job_name(job, (), fallback="job0") == "job0"
    unknown = job_name(job, None)  # sweep not recorded: every override, made path-safe
    assert "/" not in unknown and ":" not in unknown and len(unknown) <= 120
    assert (
        job_name(["model@clarifier.model=claude", "k=1"], ("model@clarifier.model",)) == "model@clarifier.model=claude"
    )


def test_a_swept_path_value_does_not_nest_directories() -> None:
    name = job_name(["dataset.gold_path=/a/b/gold.jsonl"], ("dataset.gold_path",))
    assert name == "dataset.gold_path=_a_b_gold.jsonl"


def test_the_resolver_reads_the_sweep_recorded_by_the_launching_process(tmp_path: Path) -> None:
    from cts._util.launch import Launch

    sweep = str(tmp_path / "sweep")
    job = ["clarifier=ernie", "k=1", "services.llm.api_base=http://h:1/v1"]
    swept = naming.swept_keys(["clarifier=gpt,ernie", "k=1", "services.llm.api_base=http://h:1/v1"])
    with Launch.begin(sweep, swept, multirun=True).bound():
        assert naming._resolve_job_name(job, 3, sweep) == "clarifier=ernie"
        assert naming._resolve_job_name(job, 3) == "clarifier=ernie"  # a config without the sweep dir argument
        with Launch.begin(sweep, naming.swept_keys(["k=1"]), multirun=True).bound():  # the next sweep
            assert naming._resolve_job_name(["k=1"], 3, sweep) == "job3"
    assert naming._resolve_job_name(["k=1"], 3, sweep) == "k=1"  # no record: every override, path-safe


def test_factors_are_parsed_by_hydra_not_split_by_hand() -> None:
    overrides = [
        "clarifier=rules_scope",
        "k=2",
        "clarifier.mode=sequential",
        "+extra.tags=[a,b]",
        "dataset.name='two words, one comma'",
        r"services.llm.api_key=$\{oc.env\:KEY\}",
        "model@clarifier.model=claude",
        "~search.cache",
        "limit=20",
    ]
    assert naming.factors(overrides) == {
        "clarifier": "rules_scope",
        "k": "2",
        "clarifier.mode": "sequential",
        "extra.tags": "[a,b]",
        "dataset.name": "two words, one comma",
        "services.llm.api_key": "${oc.env:KEY}",
        "model@clarifier.model": "claude",
        "search.cache": "null",
        "limit": "20",
    }
    swept = naming.swept_keys(
        ["clarifier=rules_scope,rules_region", "k=1,2", "clarifier.mode=batch,sequential", "+extra.tags=[a,b]"]
    )
    assert naming.factors(overrides, swept) == {"clarifier": "rules_scope", "k": "2", "clarifier.mode": "sequential"}
    assert naming.factors(overrides, ()) == {}
    # a job's name is its swept factors, as before
    assert job_name(overrides, swept) == "clarifier.mode=sequential,clarifier=rules_scope,k=2"


def test_override_items_keep_the_key_as_written_and_sweeps_as_written() -> None:
    assert naming.override_items(["+a=1", "++b=x", "k=1,2", "c=true"]) == [
        ("+a", "1"),
        ("++b", "x"),
        ("k", "1,2"),
        ("c", "True"),
    ]
