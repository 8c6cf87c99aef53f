"""Values a user can mistype are refused at start, each with one ``error:`` line (cts.compose.validate).

Fast tests check the value table on composed configs in-process; ``slow`` ones run the real
CLI and check that a refused run (single or multirun) exits 1 having created nothing: no
MLflow store, no run or sweep dir. Before this check ``k=7`` ran every instance unscored
and exited 0, ``concurrency=0`` hung, ``concurrency=-2`` was a traceback and ``limit=-1``
silently ran 199 of 200 instances.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from cts.compose.validate import RULES, compile_pattern, value_problems
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
OFFLINE = "experiment=offline"


def composed(*overrides: str) -> DictConfig:
    """The config ``python run.py OVERRIDES`` composes, Hydra's node included (``hydra.launcher``)."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


LLM = "services.llm"
CASES: list[tuple[tuple[str, ...], str]] = [
    (("k=7",), "k: must be an integer from 1 to 3 (the protocol's clarification budget), got 7"),
    (("k=0",), "k: must be an integer from 1 to 3 (the protocol's clarification budget), got 0"),
    (("k=4",), "k: must be an integer from 1 to 3 (the protocol's clarification budget), got 4"),
    (("k=1.5",), "k: must be an integer from 1 to 3 (the protocol's clarification budget), got 1.5"),
    (("k=two",), "k: must be an integer from 1 to 3 (the protocol's clarification budget), got 'two'"),
    (("concurrency=0",), "concurrency: must be an integer >= 1 (instances in flight at once), got 0"),
    (("concurrency=-2",), "concurrency: must be an integer >= 1 (instances in flight at once), got -2"),
    (("limit=-1",), "limit: must be an integer >= 1 or null (the first N instances; null = all), got -1"),
    (("limit=0",), "limit: must be an integer >= 1 or null (the first N instances; null = all), got 0"),
    (("seed=-1",), "seed: must be an integer >= 0 (the seed of the bootstrap intervals), got -1"),
    (
        ("hydra.launcher.job_concurrency=0",),
        (
            "hydra.launcher.job_concurrency: must be an integer >= 1 or null (instances in flight per job; "
            "null keeps concurrency), got 0"
        ),
    ),
    (
        ("hydra/launcher=slurm", "hydra.launcher.timeout_min=0"),
        "hydra.launcher.timeout_min: must be an integer >= 1 (minutes a job may run), got 0",
    ),
    (
        ("hydra/launcher=slurm", "hydra.launcher.mem_gb=-8"),
        "hydra.launcher.mem_gb: must be a number > 0 or null (null = the cluster's default), got -8",
    ),
    (
        ("hydra/launcher=slurm", "hydra.launcher.array_parallelism=0"),
        "hydra.launcher.array_parallelism: must be an integer >= 1 (jobs of the sweep running at once), got 0",
    ),
    (
        ("hydra/launcher=joblib", "hydra.launcher.n_jobs=0"),
        "hydra.launcher.n_jobs: must be an integer other than 0 (-1 = every CPU), got 0",
    ),
    (
        (f"{LLM}.spend.max_usd=0",),
        f"{LLM}.spend.max_usd: must be a number > 0 or null (USD a job dir may spend; null = no cap), got 0",
    ),
    (
        (f"{LLM}.spend.max_usd=-1",),
        f"{LLM}.spend.max_usd: must be a number > 0 or null (USD a job dir may spend; null = no cap), got -1",
    ),
    (
        (f"{LLM}.timeout_s=0",),
        f"{LLM}.timeout_s: must be a number > 0 (seconds a request may take before it counts as timed out), got 0",
    ),
    (
        (f"{LLM}.max_attempts=0",),
        f"{LLM}.max_attempts: must be an integer >= 1 (tries per call, the first included), got 0",
    ),
    (
        (f"{LLM}.max_reasks=-1",),
        f"{LLM}.max_reasks: must be an integer >= 0 (re-asks after invalid role output), got -1",
    ),
    (
        (f"{LLM}.max_reasks=null",),
        f"{LLM}.max_reasks: must be an integer >= 0 (re-asks after invalid role output), got null",
    ),
    (
        (f"{LLM}.concurrency_per_endpoint=0",),
        f"{LLM}.concurrency_per_endpoint: must be an integer >= 1 (calls in flight per endpoint), got 0",
    ),
    (
        (f"{LLM}.backoff.initial=-1",),
        f"{LLM}.backoff.initial: must be a number >= 0 (seconds of the first wait), got -1",
    ),
    ((f"{LLM}.backoff.max=-1",), f"{LLM}.backoff.max: must be a number >= 0 (seconds of the longest wait), got -1"),
    (
        (f"{LLM}.backoff.jitter=-0.5",),
        f"{LLM}.backoff.jitter: must be a number >= 0 (seconds added at random to every wait), got -0.5",
    ),
    (
        (f"{LLM}.backoff.max_retry_after=-1",),
        f"{LLM}.backoff.max_retry_after: must be a number >= 0 (seconds of a Retry-After that are honoured), got -1",
    ),
    ((f"{LLM}.backoff.initial=40",), f"{LLM}.backoff.initial: must be <= {LLM}.backoff.max (30.0), got 40"),
    (
        (f"{LLM}.adaptive.floor=0",),
        f"{LLM}.adaptive.floor: must be an integer >= 1 (the lowest limit (a model's min_concurrency wins)), got 0",
    ),
    (
        (f"{LLM}.adaptive.initial=0",),
        f"{LLM}.adaptive.initial: must be an integer >= 1 (the limit at the start), got 0",
    ),
    (
        (f"{LLM}.adaptive.decrease=1.5",),
        f"{LLM}.adaptive.decrease: must be a number > 0 and < 1 (factor applied to the calls in flight on a 429), got 1.5",
    ),
    (
        (f"{LLM}.adaptive.decrease=0",),
        f"{LLM}.adaptive.decrease: must be a number > 0 and < 1 (factor applied to the calls in flight on a 429), got 0",
    ),
    (
        (f"{LLM}.adaptive.enabled=maybe",),
        f"{LLM}.adaptive.enabled: must be one of true, false (false = a fixed limit at concurrency_per_endpoint), got 'maybe'",
    ),
    (
        (f"{LLM}.breaker_failures=-1",),
        f"{LLM}.breaker_failures: must be an integer >= 0 or null (0 = never stop), got -1",
    ),
    (
        (f"{LLM}.preflight_timeout_s=0",),
        f"{LLM}.preflight_timeout_s: must be a number > 0 (seconds a pre-flight probe may take), got 0",
    ),
    (
        (f"{LLM}.cache.mode=rw",),
        f"{LLM}.cache.mode: must be one of read_write, read_only, off (how calls use the cache), got 'rw'",
    ),
    (
        (f"{LLM}.transport=http",),
        f"{LLM}.transport: must be one of openai, litellm (how requests to OpenAI-compatible endpoints go), got 'http'",
    ),
    (
        (f"{LLM}.api_base_price.input_cost_per_token=-1e-6",),
        f"{LLM}.api_base_price.input_cost_per_token: must be a number >= 0 (USD per token), got -1e-06",
    ),
    (("bootstrap.n_resamples=0",), "bootstrap.n_resamples: must be an integer >= 1 (bootstrap resamples), got 0"),
    (
        ("bootstrap.confidence=1",),
        "bootstrap.confidence: must be a number > 0 and < 1 (confidence level of the intervals), got 1",
    ),
    (
        ("bootstrap.confidence=0",),
        "bootstrap.confidence: must be a number > 0 and < 1 (confidence level of the intervals), got 0",
    ),
    (
        ("bootstrap.confidence=95",),
        "bootstrap.confidence: must be a number > 0 and < 1 (confidence level of the intervals), got 95",
    ),
    (
        ("clarifier.model.params.temperature=-1",),
        "clarifier.model.params.temperature: must be a number >= 0 (sampling temperature), got -1",
    ),
    (
        ("clarifier.model.output_cost_per_token=-1",),
        "clarifier.model.output_cost_per_token: must be a number >= 0 (USD per token), got -1",
    ),
    (
        ("clarifier.model.max_concurrency=0",),
        "clarifier.model.max_concurrency: must be an integer >= 1 or null (calls in flight to this model), got 0",
    ),
    (("search.max_llm_calls=0",), "search.max_llm_calls: must be an integer >= 1 (agent turns per run), got 0"),
    (("search.top_p=0",), "search.top_p: must be a number > 0 and <= 1 (agent nucleus sampling mass), got 0"),
    (
        ("clarifier.max_output_tokens=0",),
        "clarifier.max_output_tokens: must be an integer >= 1 or null (tokens a reply may hold), got 0",
    ),
    (
        ("search.model.request.reasoning_allowance=-1",),
        (
            "search.model.request.reasoning_allowance: must be an integer >= 0 (reasoning tokens a reply may add to "
            "its cap), got -1"
        ),
    ),
    (
        ("search.fetcher.routes.http.timeout_s=0",),
        "search.fetcher.routes.http.timeout_s: must be a number > 0 (seconds a call may take), got 0",
    ),
    (
        ("search/provider=serper", "search.provider.max_attempts=0"),
        "search.provider.max_attempts: must be an integer >= 1 (tries per call, the first included), got 0",
    ),
    ((OFFLINE, "search.top_k=0"), "search.top_k: must be an integer >= 1 (passages of the extractive answer), got 0"),
    (
        (OFFLINE, "judge.full=1.5"),
        "judge.full: must be a number > 0 and <= 1 (share of a nugget's content tokens in the answer), got 1.5",
    ),
    (
        (OFFLINE, "judge.partial=0"),
        "judge.partial: must be a number > 0 and <= 1 (share of a nugget's content tokens in the answer), got 0",
    ),
    (
        (OFFLINE, "extractor.min_tokens=0"),
        "extractor.min_tokens: must be an integer >= 1 (content tokens a fragment needs), got 0",
    ),
    ((OFFLINE, "judge.partial=0.9"), "judge.partial: must be <= judge.full (0.8), got 0.9"),
    (
        (OFFLINE, "extractor.weights=[3,2,5]"),
        "extractor.weights.2: must be an integer from 1 to 3 (nugget weights are 1, 2 or 3), got 5",
    ),
    (
        ("qtyper=llm", "qtyper.max_reasks=-1"),
        "qtyper.max_reasks: must be an integer >= 0 or null (re-asks after invalid output), got -1",
    ),
    (
        ("gate=rules", "gate.min_titles=-1"),
        "gate.min_titles: must be an integer >= 0 (corpus titles sharing the head term for an ask), got -1",
    ),
    (
        (OFFLINE, "clarifier.mode=parallel"),
        "clarifier.mode: must be one of batch, sequential (k questions at once, or one per turn), got 'parallel'",
    ),
    (("dataset.n=0",), "dataset.n: must be an integer >= 1 (demo instances), got 0"),
    (
        ("dataset=jsonl", "dataset.max_field_chars=0"),
        "dataset.max_field_chars: must be an integer >= 1 (characters of an id or query value), got 0",
    ),
    (
        ("experiment=judge_robustness", "robustness.budgets=[1,4]"),
        "robustness.budgets.1: must be an integer from 1 to 3 (k values of the source jobs), got 4",
    ),
    (
        ("experiment=judge_robustness", "robustness.judges.lexical_strict.partial=0.95"),
        "robustness.judges.lexical_strict.partial: must be <= robustness.judges.lexical_strict.full (0.9), got 0.95",
    ),
]


@pytest.mark.parametrize(("overrides", "line"), CASES, ids=[" ".join(o) for o, _ in CASES])
def test_each_mistyped_value_gets_its_one_line(overrides: tuple[str, ...], line: str) -> None:
    assert value_problems(composed(*overrides)) == [line]


def test_every_problem_of_a_config_is_listed_at_once() -> None:
    problems = value_problems(composed("k=7", "concurrency=0", "limit=-1", "bootstrap.confidence=1"))
    assert [p.split(":")[0] for p in problems] == ["k", "concurrency", "limit", "bootstrap.confidence"]


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        (OFFLINE,),
        ("limit=null",),
        ("limit=1", "k=3", "concurrency=1"),
        ("hydra.launcher.job_concurrency=null",),
        (f"{LLM}.breaker_failures=0", f"{LLM}.spend.max_usd=0.01", f"{LLM}.max_reasks=0"),
        ("experiment=build_gold",),
        ("experiment=judge_robustness",),
        ("experiment=backbone_stability",),
        ("hydra/launcher=slurm",),
        ("hydra/launcher=basic",),
        ("hydra/launcher=joblib",),
    ],
)
def test_the_shipped_configs_pass(overrides: tuple[str, ...]) -> None:
    assert value_problems(composed(*overrides)) == []


def _launchers() -> list[str]:
    """Every ``hydra/launcher`` option installed: Hydra's, the plugins' (joblib, submitit_*) and cts's own."""
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return GlobalHydra.instance().config_loader().get_group_options("hydra/launcher")


def test_every_launcher_s_own_defaults_pass() -> None:
    """null is submitit's default for cpus_per_task and mem_gb (the cluster's default): accepted as typed."""
    launchers = _launchers()
    assert {"basic", "joblib", "submitit_local", "submitit_slurm", "cts", "slurm"} <= set(launchers)
    for launcher in launchers:
        assert value_problems(composed(f"hydra/launcher={launcher}")) == [], launcher
    refused = value_problems(composed("hydra/launcher=submitit_slurm", "hydra.launcher.cpus_per_task=0"))
    assert refused == [
        "hydra.launcher.cpus_per_task: must be an integer >= 1 or null (null = the cluster's default), got 0"
    ]


def _options() -> list[str]:
    conf = REPO / "conf"
    skip = {"hydra", "experiment", "paths", "tracking", "task", "llm", "model"}
    return sorted(
        f"{g.name}={p.stem}" for g in conf.iterdir() if g.is_dir() and g.name not in skip for p in g.glob("*.yaml")
    ) + [f"search/provider={p.stem}" for p in (conf / "search/provider").glob("*.yaml")]


@pytest.mark.parametrize("option", _options())
def test_every_option_of_every_group_passes(option: str) -> None:
    assert value_problems(composed(option)) == []


def test_every_numeric_default_in_conf_is_covered_by_a_rule() -> None:
    """A number added to conf/ without bounds fails here: declare its key in its node's schema (cts.compose.schema)."""
    from cts.compose.validate import _checked_leaves

    patterns = [compile_pattern(p) for r in RULES for p in r.patterns]
    uncovered = set()
    for option in [
        "",
        *_options(),
        "experiment=build_gold",
        "experiment=judge_robustness",
        *(f"hydra/launcher={launcher}" for launcher in _launchers()),
        "qtyper=llm",
        "gate=llm",
        *(f"clarifier={m.stem}" for m in (REPO / "conf" / "model").glob("*.yaml")),
    ]:
        cfg = composed(*([option] if option else []))
        for path, parent, key in _checked_leaves(cfg):
            if (
                ".request.accepted_with." in path
            ):  # a provider's documented rule (cts.compose.request_rules), not a knob
                continue
            node = parent._get_node(key)
            value = None if node._is_interpolation() or node._is_missing() else node._value()
            if (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and not any(p.match(path) for p in patterns)
            ):
                uncovered.add(path)
    assert not uncovered, sorted(uncovered)


def test_patterns_match_keys_not_substrings() -> None:
    assert compile_pattern("**.timeout_s").match("services.llm.timeout_s")
    assert compile_pattern("**.timeout_s").match("timeout_s")
    assert not compile_pattern("**.timeout_s").match("services.llm.preflight_timeout_s")
    assert compile_pattern("services.llm.backoff.*").match("services.llm.backoff.max")
    assert not compile_pattern("services.llm.backoff.*").match("services.llm.backoff")
    assert not compile_pattern("k").match("kk")


def test_an_unresolvable_or_missing_value_is_left_to_the_input_errors() -> None:
    """``???`` and ``${oc.env:UNSET}`` are said by cts.compose.errors (one line each); the table skips them."""
    assert value_problems(composed("dataset=cts518")) == []  # path: ${oc.env:CTS518_PATH} (unset)


# --- the CLI: refused before anything is created ---------------------------------------------


def cli(tmp: Path, cache_dir: Path, *args: str, multirun: bool = False) -> subprocess.CompletedProcess[str]:
    """``python run.py [-m] ARGS`` from ``tmp`` with the outputs under ``tmp/outputs`` (the default layout)."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    argv = [
        sys.executable,
        str(REPO / "run.py"),
        *(["-m"] if multirun else []),
        *args,
        f"paths.output_root={tmp / 'outputs'}",
        f"paths.cache_dir={cache_dir}",
    ]
    return run_script(argv[1:], cwd=tmp, env=env, timeout=300)


def refused(proc: subprocess.CompletedProcess[str], tmp: Path) -> list[str]:
    """Assert exit 1, no traceback, nothing created under ``tmp/outputs``; return the ``error:`` lines."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "Error executing job" not in out, out[-3000:]
    assert not (tmp / "outputs").exists(), sorted(str(p) for p in (tmp / "outputs").rglob("*"))
    return [line for line in proc.stderr.splitlines() if line.startswith("error: ")]


@pytest.mark.slow
def test_bad_values_stop_a_single_run_before_the_store_or_its_dir(tmp_path: Path, cache_dir: Path) -> None:
    bad = [
        "k=7",
        "concurrency=0",
        "limit=-1",
        "hydra.launcher.job_concurrency=0",
        f"{LLM}.spend.max_usd=0",
        f"{LLM}.timeout_s=-1",
        f"{LLM}.adaptive.decrease=2",
        "bootstrap.n_resamples=0",
        "bootstrap.confidence=1.5",
    ]
    errors = refused(cli(tmp_path, cache_dir, OFFLINE, *bad), tmp_path)
    assert sorted(e.split(":")[1].strip() for e in errors) == sorted(b.split("=")[0] for b in bad)
    assert all(re.search(r": must be .*, got ", e) for e in errors)
    (line,) = refused(cli(tmp_path, cache_dir, OFFLINE, "k=0"), tmp_path)  # was: no "error:" prefix
    assert line == "error: k: must be an integer from 1 to 3 (the protocol's clarification budget), got 0"


@pytest.mark.slow
def test_a_bad_value_in_any_job_stops_the_sweep_before_it_starts(tmp_path: Path, cache_dir: Path) -> None:
    proc = cli(tmp_path, cache_dir, OFFLINE, "clarifier=rules_scope,none", "k=1,7", "sweep_report=false", multirun=True)
    assert refused(proc, tmp_path) == [
        "error: k: must be an integer from 1 to 3 (the protocol's clarification budget), got 7"
    ]
    assert "Launching" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_broken_dataset_is_refused_before_the_store_or_the_run_dir(tmp_path: Path, cache_dir: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"id": "a", "blurred_query": 5, "fused_query": "x"}\n', encoding="utf-8")
    args = (OFFLINE, "dataset=jsonl", f"dataset.path={data}", f"dataset.gold_path={tmp_path / 'gold.jsonl'}")
    (line,) = refused(cli(tmp_path, cache_dir, *args), tmp_path)
    assert line == f"error: {data}:1: blurred_query: must be a string, got int"
    (line,) = refused(cli(tmp_path, cache_dir, *args, "k=1,2", multirun=True), tmp_path)
    assert line == f"error: {data}:1: blurred_query: must be a string, got int"
