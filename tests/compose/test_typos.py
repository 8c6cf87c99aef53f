"""A typo'd key or option, plain or appended (``+key``), single run or multirun: one ``error:`` line, nothing created.

Before: ``+concurency=1`` ran and was stored in the fingerprint (changing it for nothing); in a multirun
a typo in a swept key or option printed Hydra's message over 9-40 lines and a sweep dir was created;
a typo under a component (``clarifier.treshold=1``) printed Hydra's message over 5 lines, and so did a key
another option of the group sets (``clarifier=none clarifier.order=[time]``); an appended one
(``+clarifier.treshold=1``) was refused by the pre-flight over three lines; a deeper one
(``search.provider.x=1``, ``clarifier.model.temprature=0.2``) got Hydra's five lines.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from cts.compose.component_keys import component_key_problems
from cts.compose.schema import CLOSED, key_at
from cts.compose.schema._run import Config
from cts.compose.validate import appended_key_problems, command_line_problems
from hydra_plugins.cts_model_roles.cts_model_roles import MEMBER_GROUPS, ROLES
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
CONCURENCY = "concurency: no such key (did you mean concurrency?)"
REGIO = "clarifier=rules_regio: no such option (did you mean rules_region? options: "
TRESHOLD = "clarifier.treshold: no such key (clarifier's options take: "
ORDER_NONE = "clarifier.order: clarifier=none does not take it (clarifier=rules_region,rules_scope do)"
STOP_EARLI = "clarifier.stop_earli: no such key (did you mean clarifier.stop_early?)"


def _problems(*args: str) -> list[str]:
    """What run.py refuses before Hydra composes anything."""
    return command_line_problems(list(args), [CONF], (*ROLES, *MEMBER_GROUPS)) + component_key_problems(args, [CONF])


def _composed(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


@pytest.mark.parametrize("arg", ["concurency=1", "+concurency=1", "++concurency=1", "concurency=1,2"])
def test_a_mistyped_first_key_gets_one_line_plain_appended_or_swept(arg: str) -> None:
    assert _problems("-m", "experiment=offline", arg, "k=1,2") == [CONCURENCY]


@pytest.mark.parametrize(
    "arg", ["services.llm.cache.mod=off", "+services.llm.cache.mod=off", "services.llm.cach.mode=off"]
)
def test_a_mistyped_deeper_key_where_every_schema_on_its_path_is_closed_gets_one_line(arg: str) -> None:
    (line,) = _problems(arg)
    assert line in (
        "services.llm.cache.mod: no such key (did you mean services.llm.cache.mode?)",
        "services.llm.cach: no such key (did you mean services.llm.cache?)",
    )


@pytest.mark.parametrize(
    "arg", ["clarifier=rules_regio", "clarifier=rules_scope,rules_regio", "+clarifier=rules_regio"]
)
def test_a_mistyped_option_gets_one_line_naming_the_options(arg: str) -> None:
    (line,) = _problems(arg)
    assert line.startswith(REGIO) and "rules_scope" in line and "\n" not in line


@pytest.mark.parametrize(
    "args",
    [
        ("-m", "experiment=offline", "clarifier=rules_scope,rules_region,none", "k=1,2,3"),
        ("clarifier=gpt,claude", "judge=panel", "judge/members=[ernie,gpt]", "ua/persona=terse"),
        ("experiment=build_gold", "build_gold.instances=data.jsonl", "+build_gold.out_dir=gold/"),
        ("services.llm.api_base=http://127.0.0.1:9/v1", "llm@services.llm=default", "~seed", "plan=only"),
        ("--config-dir", "mine", "hydra.sweep.dir=x", "+hydra.job.env_set.A=1", "+judge.full=0.5", "dataset=null"),
        ("services.llm.cache.mode=off", "plan.calibration_n=10", "services.llm.role_timeout_s.judge=30", "k=1"),
        ("services.llm.batch.roles=[ua]", "bootstrap.n_resamples=100", "services.local_llm.n_ctx=512"),
        ("search.provider=serper", "clarifier=choice(gpt,claude)", "k=range(1,4)", "tracking.uri=sqlite:///m.db"),
    ],
)
def test_what_the_config_defines_passes(args: tuple[str, ...]) -> None:
    assert _problems(*args) == []


@pytest.mark.parametrize(
    "args",
    [
        ("experiment=offline", "clarifier.treshold=1", "limit=1"),
        ("-m", "experiment=offline", "clarifier=rules_scope", "k=1,2", "clarifier.treshold=1"),
        ("-m", "clarifier=gpt,rules_scope", "clarifier.treshold=1,2"),
        ('clarifier.treshold="阈值"',),  # a CJK value (quoted, as Hydra takes it)
    ],
)
def test_a_mistyped_component_key_gets_one_line_listing_what_its_options_take(args: tuple[str, ...]) -> None:
    (line,) = _problems(*args)
    assert line.startswith(TRESHOLD) and line.endswith(")") and "\n" not in line
    taken = line.removeprefix(TRESHOLD).removesuffix(")").split(", ")
    assert {"mode", "order", "stop_early", "prompt", "model"} <= set(taken)  # the rules' and the LLM's


@pytest.mark.parametrize(
    ("arg", "meant"),
    [
        ("clarifier.stop_earli=true", "clarifier.stop_early"),
        ("search.max_llm_call=3", "search.max_llm_calls"),
        ("judge.aggregat=mean", "judge.aggregate"),
        ('clarifier.structure="是"', "clarifier.structured"),  # a key only a signature has; a CJK value
    ],
)
def test_a_component_key_close_to_one_its_options_take_gets_a_suggestion(arg: str, meant: str) -> None:
    key = arg.split("=", 1)[0]
    assert _problems("experiment=offline", arg) == [f"{key}: no such key (did you mean {meant}?)"]


@pytest.mark.parametrize(
    "args",
    [
        ("+clarifier.treshold=1",),
        ("++clarifier.treshold=1",),
        ("-m", "experiment=offline", "+clarifier.treshold=1,2", "k=1,2"),
        ('+clarifier.treshold="阈值"',),
    ],
)
def test_an_appended_component_key_no_option_s_target_takes_gets_the_same_one_line(args: tuple[str, ...]) -> None:
    (line,) = _problems(*args)
    assert line.startswith(TRESHOLD) and line.endswith(")") and "\n" not in line
    assert _problems("+clarifier.stop_earli=true") == [STOP_EARLI]


@pytest.mark.parametrize(
    "args",
    [
        ("+clarifier.structured=true", "+clarifier.max_reasks=2"),  # parameters of a target no option sets
        ("experiment=offline", "+search/provider=serper", "+search.provider=serper", "+ua.persona=terse"),  # groups
        ("+clarifier.order=[time]",),  # an option sets it: Hydra or the pre-flight says what is wrong
    ],
)
def test_an_appended_parameter_some_option_s_target_takes_passes(args: tuple[str, ...]) -> None:
    assert _problems(*args) == []


def test_an_appended_key_of_a_target_taking_any_keyword_is_left_to_the_pre_flight(tmp_path: Path) -> None:
    (tmp_path / "clarifier").mkdir()
    (tmp_path / "clarifier" / "mine.yaml").write_text("_target_: builtins.dict\n", encoding="utf-8")
    assert component_key_problems(["+clarifier.anything=1"], [tmp_path, CONF]) == []
    assert component_key_problems(["clarifier.anything=1"], [tmp_path, CONF]) != []


def test_a_parameter_no_option_sets_is_told_to_be_appended() -> None:
    assert _problems("clarifier.structured=true") == [
        "clarifier.structured: no option of clarifier sets it; add it with +clarifier.structured=VALUE"
    ]


@pytest.mark.parametrize(
    "args",
    [
        ("clarifier=rules_scope", "clarifier.order=[time,scope,region]", "clarifier.mode=sequential"),
        ("-m", "clarifier=gpt,rules_scope", "clarifier.stop_early=true,false", "clarifier.mode=sequential"),
        ("+clarifier.structured=true", "search.max_llm_calls=3", "judge.members=[lexical]", "ua.persona=terse"),
        ("experiment=local_llm", "clarifier.max_output_tokens=128", 'clarifier.mode="批量"'),
        ("hydra.verbose=true", "hydra.job.chdir=false", "llm@services.llm=default", "~clarifier.order"),
    ],
)
def test_a_component_key_some_option_or_preset_sets_passes(args: tuple[str, ...]) -> None:
    assert _problems(*args) == []


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("clarifier=none", "clarifier.order=[time]"), ORDER_NONE),
        (("-m", "clarifier=none,rules_scope", "clarifier.order=[time]"), ORDER_NONE),
        (
            ("clarifier.order=[time]",),
            "clarifier.order: clarifier=ernie does not take it (clarifier=rules_region,rules_scope do)",
        ),
        (
            ("experiment=offline", "search.provider.x=1"),
            "search.provider: search=extractive does not take it (search=webdancer do)",
        ),
        (
            ("experiment=offline", "clarifier.max_output_tokens=64"),  # only local_llm's preset sets it
            "clarifier.max_output_tokens: clarifier=rules_scope does not take it (clarifier=claude,deepseek,ernie,gemini,gemma3_270m,gpt,kimi,qwen,smollm2_135m,webdancer do)",
        ),
        (
            ("-m", "experiment=offline,local_llm", "search.top_k=3"),
            "search.top_k: search=webdancer does not take it (search=extractive do)",
        ),
    ],
)
def test_a_key_the_chosen_option_lacks_names_the_options_that_take_it(args: tuple[str, ...], line: str) -> None:
    assert _problems(*args) == [line]


@pytest.mark.parametrize(
    "args",
    [
        ("clarifier=rules_region", "clarifier.order=[time]"),
        ("experiment=offline", "clarifier.order=[time]", "judge.full=0.9"),
        ("experiment=local_llm", "search.max_llm_calls=3", "clarifier.max_output_tokens=9"),  # the preset sets it too
        ("-m", "clarifier=glob(rules_*)", "clarifier.order=[time]"),  # a pattern: not known for sure
        ("--config-name", "mine", "clarifier.order=[time]"),  # another primary config
        ("model@clarifier.model=gpt", "experiment=offline", "clarifier.model.id=x"),  # a node added on the line
    ],
)
def test_a_key_is_not_refused_when_the_chosen_option_has_it_or_is_not_known_for_sure(args: tuple[str, ...]) -> None:
    assert _problems(*args) == []


def _docs_commands() -> list[tuple[str, tuple[str, ...]]]:
    """Every ``python run.py ...`` of the README and docs/, its arguments up to a shell operator."""
    found = []
    for md in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for line in md.read_text(encoding="utf-8").replace("\\\n", " ").splitlines():
            for m in re.finditer(r"python run\.py\b([^`\n]*)", line):
                try:
                    words = shlex.split(m.group(1), comments=True)
                except ValueError:
                    continue
                cut = next((i for i, w in enumerate(words) if w in {"&&", "||", "|", ";"} or w[:1] in "<>"), None)
                found.append((md.name, tuple(words[:cut])))
    return found


EXCUSED = {
    "group=option": "extend.md's grammar, not a command",
    "clarifier=mine": "models.md's user adds conf/model/mine.yaml first",
    "services.llm.model=x": "reference.md shows the line a retired key gets",
    "[orig_answers=<jsonl>]": "release.md's optional arguments",
}


def test_no_command_of_the_docs_is_refused() -> None:
    commands = [(name, args) for name, args in _docs_commands() if not set(args) & set(EXCUSED)]
    assert len(commands) > 50
    assert [(name, args, p) for name, args in commands if (p := _problems(*args))] == []


def _option_keys_lines() -> list[tuple[str, ...]]:
    """Per preset (and none) and option of each group: the option chosen and every key it sets, overridden."""
    lines = []
    for group in sorted(d.name for d in CONF.iterdir() if d.is_dir() and d.name not in {"hydra", "experiment", "task"}):
        for option in sorted(f.stem for f in (CONF / group).glob("*.yaml")):
            node = yaml.safe_load((CONF / group / f"{option}.yaml").read_text(encoding="utf-8")) or {}
            keys = [f"{group}.{k}=1" for k in node if k not in {"defaults", "_target_"}]
            for preset in (None, *PRESETS):
                lines.append((*([f"experiment={preset}"] if preset else ()), f"{group}={option}", *keys))
    return lines


def test_no_key_an_option_sets_is_refused_under_that_option_whatever_the_preset() -> None:
    lines = _option_keys_lines()
    assert len(lines) > 100
    assert [(line, p) for line in lines if (p := _problems(*line))] == []


MODEL_KEYS = "clarifier.model's options take: api_base, api_key_env, batch, id, input_cost_per_token, max_concurrency, "
PROVIDER_X = "search.provider.x: no such key (search.provider's options take: api_key_env, backoff_s, base_url, "


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (("search.provider.x=1",), PROVIDER_X),
        (("-m", "search/provider=serper,searxng", "+search.provider.x=1"), PROVIDER_X),
        (
            ("search.provider.snippet_char=1",),
            "search.provider.snippet_char: no such key (did you mean search.provider.snippet_chars?)",
        ),
        (("clarifier.model.temprature=0.2",), f"clarifier.model.temprature: no such key ({MODEL_KEYS}"),
        (("+clarifier.model.temprature=0.2",), f"clarifier.model.temprature: no such key ({MODEL_KEYS}"),
        (
            ("search.summary_model.api_bas=x",),
            "search.summary_model.api_bas: no such key (did you mean search.summary_model.api_base?)",
        ),
        (
            ("clarifier.model.min_concurrency=2",),
            "clarifier.model.min_concurrency: no option of clarifier.model sets it; add it with +",
        ),
        (
            ("services.llm.batch.rolez=[ua]",),
            "services.llm.batch.rolez: no such key (did you mean services.llm.batch.roles?)",
        ),
    ],
)
def test_a_deeper_key_is_checked_where_the_node_s_keys_are_known(args: tuple[str, ...], start: str) -> None:
    (line,) = _problems(*args)
    assert line.startswith(start) and "\n" not in line


@pytest.mark.parametrize(
    "arg",
    [
        "clarifier.model.params.temprature=0.2",  # params take any provider parameter
        "search.fetcher.routes.ftp.timeout_s=1",  # a node set inline
        "judge.members.lexical.ful=1",  # a keyed group's member
        "+clarifier.model.min_concurrency=2",  # a field of ModelSpec no model file sets
        "+search.provider.gl=cn",  # another provider sets it: the pre-flight checks local_wiki's class
    ],
)
def test_a_deeper_key_under_a_node_of_unknown_keys_is_left_alone(arg: str) -> None:
    assert _problems("judge=panel", arg) == []


def _nested_lines() -> list[tuple[str, ...]]:
    """Each model and provider option chosen, with every key its file sets overridden where it lands."""
    lines = []
    for model in sorted(CONF.glob("model/*.yaml")):
        keys = [k for k in yaml.safe_load(model.read_text(encoding="utf-8")) if k != "_target_"]
        nodes = ("clarifier.model", "search.model", "search.summary_model")
        lines.append((f"clarifier={model.stem}", *(f"{n}.{k}=1" for n in nodes for k in keys)))
    for provider in sorted(CONF.glob("search/provider/*.yaml")):
        keys = [k for k in yaml.safe_load(provider.read_text(encoding="utf-8")) if k != "_target_"]
        lines.append((f"search/provider={provider.stem}", *(f"search.provider.{k}=1" for k in keys)))
    return lines


def test_no_key_a_model_or_provider_file_sets_is_refused_under_its_node() -> None:
    lines = _nested_lines()
    assert len(lines) >= 13
    assert [(line, p) for line in lines if (p := _problems(*line))] == []


def test_the_options_of_a_user_s_config_dir_count_even_when_their_target_cannot_load(tmp_path: Path) -> None:
    (tmp_path / "clarifier").mkdir()
    (tmp_path / "clarifier" / "mine.yaml").write_text("_target_: nowhere.Missing\ndepth: 2\n", encoding="utf-8")
    dirs = [tmp_path, CONF]
    assert component_key_problems(["clarifier=mine", "clarifier.depth=3"], dirs) == []
    assert component_key_problems(["clarifier.dept=深"], dirs) == [
        "clarifier.dept: no such key (did you mean clarifier.depth?)"
    ]


def test_an_option_of_a_user_s_config_dir_that_shadows_one_of_conf_counts_with_its_own_keys(tmp_path: Path) -> None:
    (tmp_path / "clarifier").mkdir()
    (tmp_path / "clarifier" / "none.yaml").write_text("_target_: x.Y\norder: [时间]\n", encoding="utf-8")
    args = ["clarifier=none", "clarifier.order=[time]"]
    assert command_line_problems(args, [tmp_path, CONF]) + component_key_problems(args, [tmp_path, CONF]) == []


def test_a_component_key_and_a_preset_key_parse_each_config_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    preset = "# @package _global_\nclarifier:\n  width: 2\npreset_only: 预设\n"
    (tmp_path / "clarifier").mkdir()
    (tmp_path / "clarifier" / "mine.yaml").write_text("_target_: nowhere.Missing\ndepth: 2\n", encoding="utf-8")
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "中文.yaml").write_text(preset, encoding="utf-8")
    (tmp_path / "config.yaml").write_text("defaults:\n  - clarifier: mine\n", encoding="utf-8")
    parsed: Counter[str] = Counter()
    load = yaml.load

    def counted(text: str, Loader: type) -> object:  # noqa: N803 - yaml.load's own name
        parsed[text] += 1
        return load(text, Loader=Loader)

    monkeypatch.setattr(yaml, "load", counted)  # yaml.safe_load calls it too
    args = ["clarifier.width=3", 'preset_only="中文"']  # fresh dirs: no cache of this process has read them
    assert command_line_problems(args, [tmp_path]) + component_key_problems(args, [tmp_path]) == []
    assert parsed[preset] == 1 and max(parsed.values()) == 1, parsed


def test_an_appended_key_a_closed_schema_lacks_is_refused_where_it_lands() -> None:
    cfg = _composed("experiment=offline", "+concurency=1", "+services.llm.cache.mod=off", "+tracking.urii=x")
    assert appended_key_problems(cfg) == [
        CONCURENCY,
        "services.llm.cache.mod: no such key (did you mean services.llm.cache.mode?)",
        "tracking.urii: no such key (did you mean tracking.uri?)",
    ]


@pytest.mark.parametrize(
    "arg",
    [
        "+search.summary_params.reasoning_effort=none",  # a model's params take any provider parameter
        "+judge.treshold=0.5",  # a component: the pre-flight checks it against the signature
        "+paths.mine=x",  # a node no schema describes
    ],
)
def test_an_appended_key_where_no_closed_schema_says_so_is_left_to_the_pre_flight(arg: str) -> None:
    assert appended_key_problems(_composed(arg)) == []


def _nodes(node: DictConfig, path: str, schema: type) -> list[str]:
    """Keys under ``node`` that its closed ``schema`` does not declare (recursively)."""
    if "_target_" in node or schema not in CLOSED:
        return []
    names = {f.name for f in dataclasses.fields(schema)}
    found = [f"{path}{k}" for k in node if k not in names and not (schema is Config and k in PRESET_NODES)]
    for k in node:
        child, info = node._get_node(k), key_at(f"{path}{k}")
        if isinstance(child, DictConfig) and info is not None and info.node is not None:
            found += _nodes(child, f"{path}{k}.", info.node)
    return found


PRESET_NODES = {"build_gold", "probes"}  # nodes an experiment preset adds at the top (declared by no schema)
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("preset", [None, *PRESETS])
def test_a_closed_schema_declares_every_key_its_node_has(preset: str | None) -> None:
    cfg = _composed(*([f"experiment={preset}"] if preset else []))
    assert _nodes(cfg, "", Config) == []


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_script(
        [str(REPO / "run.py"), *args, f"paths.output_root={tmp_path / 'out'}"],
        cwd=tmp_path,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("+concurency=1",), CONCURENCY),
        (
            ("services.llm.cache.mod=off",),
            "services.llm.cache.mod: no such key (did you mean services.llm.cache.mode?)",
        ),
        (("-m", "+concurency=1", "k=1,2"), CONCURENCY),
        (("-m", "clarifier=rules_scope,rules_regio", "k=1,2"), REGIO),
        (
            ("-m", "services.llm.cache.mod=off,read_only"),
            "services.llm.cache.mod: no such key (did you mean services.llm.cache.mode?)",
        ),
        (("clarifier.treshold=1", "limit=1"), TRESHOLD),
        (("+clarifier.treshold=1",), TRESHOLD),
        (("-m", "+clarifier.treshold=1", "k=1,2"), TRESHOLD),
        (("search=webdancer", "search.provider.x=1"), PROVIDER_X),
        (("clarifier=gpt", "clarifier.model.temprature=0.2"), f"clarifier.model.temprature: no such key ({MODEL_KEYS}"),
        (
            ("-m", "clarifier=gpt,claude", "clarifier.model.temprature=0.2", "k=1,2"),
            "clarifier.model.temprature: no such key",
        ),
        (("clarifier=none", "clarifier.order=[time]"), ORDER_NONE),
        (("-m", "clarifier=none,rules_scope", "clarifier.order=[time]", "k=1,2"), ORDER_NONE),
        (("-m", "clarifier=rules_scope", "k=1,2", "clarifier.treshold=1"), TRESHOLD),
        (('clarifier.stop_earli="是"',), STOP_EARLI),
        (
            ("tracking.experiment=中文",),
            "tracking.experiment=中文: Hydra takes CJK text only quoted: type 'tracking.experiment=\"中文\"'",
        ),
        (
            ("-m", "dataset=jsonl", "dataset.path=数据/甲.jsonl,b.jsonl"),
            "dataset.path=数据/甲.jsonl,b.jsonl: Hydra takes CJK text only quoted: type 'dataset.path=\"数据/甲.jsonl\",b.jsonl'",
        ),
    ],
)
def test_the_command_line_refuses_with_one_line_and_creates_nothing(
    tmp_path: Path, args: tuple[str, ...], line: str
) -> None:
    _refused_with_one_line(tmp_path, line, *args, "experiment=offline")


def _refused_with_one_line(tmp_path: Path, line: str, *args: str) -> None:
    """``run.py args`` exits 1 with the one ``error:`` line ``line`` and creates no sweep or output dir."""
    proc = _run(tmp_path, *args, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert proc.returncode == 1, proc.stderr
    (printed,) = proc.stderr.strip().splitlines()
    assert printed.startswith(f"error: {line}"), proc.stderr
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("-m", "experiment=offline,local_llm", "search.top_k=3"),  # the preset swept: each job's option
            "search.top_k: search=webdancer does not take it (search=extractive do)",
        ),
        (
            ("-m", "clarifier=choice(none,rules_scope)", "clarifier.order=[time]", "k=1,2"),
            ORDER_NONE,
        ),
        (("-m", "search/provider=serper,searxng", "search.provider.g=cn", "k=1,2"), "search.provider.g: no such key"),
    ],
)
def test_a_multirun_refuses_a_key_one_of_its_jobs_lacks_with_one_line_and_no_sweep_dir(
    tmp_path: Path, args: tuple[str, ...], line: str
) -> None:
    _refused_with_one_line(tmp_path, line, *args)


@pytest.mark.parametrize(
    ("arg", "said"),
    [
        ("+clarifier.mode=批量", "type '+clarifier.mode=\"批量\"'"),
        ("clarifier.order=[时间, scope]", "type 'clarifier.order=[\"时间\", scope]'"),
        ("judge.members={a:甲}", "put each CJK value in double quotes, the override in single quotes"),
        ("预设=1", "no CJK text in a key: set it in a config file"),
    ],
)
def test_unquoted_cjk_text_gets_the_override_to_type(arg: str, said: str) -> None:
    (line,) = [p for p in _problems(arg) if "Hydra takes" in p]
    assert line.startswith(arg.split("=", 1)[0]) and said in line
    assert _problems('tracking.experiment="中文"', "dataset=jsonl", "dataset.path='数据/甲.jsonl'") == []


def test_a_component_key_its_option_sets_still_composes(tmp_path: Path) -> None:
    proc = _run(
        tmp_path, "--cfg", "job", "experiment=offline", "clarifier.order=[time,scope,region]", "clarifier.mode='批量'"
    )
    assert proc.returncode == 0, proc.stderr
    assert "order:\n  - time\n  - scope\n  - region\n  mode: 批量" in proc.stdout


def test_hydra_s_other_composition_errors_keep_their_first_line() -> None:
    from hydra.errors import ConfigCompositionException

    from cts.compose.errors import composition_problem

    error = ConfigCompositionException("Could not override 'judge/members'. No match in the defaults list.\nTo append")
    assert composition_problem(error) == "Could not override 'judge/members'. No match in the defaults list."
