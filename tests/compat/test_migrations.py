"""A job dir whose stored protocol config differs only by renamed keys resumes; any other change refuses."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from cts.compat import config as migrations
from cts.compat import renames
from cts.compat.config import migrate
from cts.compat.migrate import Migration, rename_in_nodes, rename_path
from cts.compose.job_config import protocol_config
from cts.core.errors import ResumeRefused
from cts.tasks.job import check_resume
from tests.prewarmed import run_script

OLD = {"k": 1, "stats": {"n_resamples": 100}, "clarifier": {"model": {"_target_": "cts.llm.ModelSpec", "model": "x/y"}}}
NEW = {
    "k": 1,
    "bootstrap": {"n_resamples": 100},
    "clarifier": {"model": {"_target_": "cts.llm.ModelSpec", "id": "x/y"}},
}
RENAMES = (
    Migration("stats -> bootstrap", rename_path("stats", "bootstrap")),
    Migration("ModelSpec.model -> id", rename_in_nodes("ModelSpec", "model", "id")),
)


def _old_dir(tmp_path: Path) -> Path:
    check_resume(tmp_path, "old0", OLD)
    (tmp_path / "records.jsonl").write_text('{"id": "a"}\n', encoding="utf-8")
    return tmp_path


def test_migrate_renames_keys_and_leaves_the_stored_config_alone() -> None:
    assert migrate(OLD, RENAMES) == NEW
    assert OLD["stats"] == {"n_resamples": 100} and "model" in OLD["clarifier"]["model"]  # type: ignore[index,operator]
    assert migrate(NEW, RENAMES) == NEW  # today's names pass through


def test_a_dir_of_renamed_keys_resumes_and_is_rewritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _old_dir(tmp_path)
    monkeypatch.setattr(migrations, "MIGRATIONS", ())
    with pytest.raises(ResumeRefused):  # without the migrations the dir is another configuration
        check_resume(job, "new1", NEW)
    monkeypatch.setattr(migrations, "MIGRATIONS", RENAMES)
    check_resume(job, "new1", NEW)
    stored = json.loads((job / "fingerprint.json").read_text())
    assert stored == {"fingerprint": "new1", "config": NEW, "migrated_from": ["old0"]}
    check_resume(job, "new1", NEW)  # and it resumes again under today's fingerprint, history kept
    assert json.loads((job / "fingerprint.json").read_text())["migrated_from"] == ["old0"]


def test_a_renamed_key_with_a_changed_value_still_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _old_dir(tmp_path)
    monkeypatch.setattr(migrations, "MIGRATIONS", RENAMES)
    changed = {**NEW, "bootstrap": {"n_resamples": 200}}
    with pytest.raises(ResumeRefused) as stop:
        check_resume(job, "new2", changed)
    assert "  bootstrap.n_resamples: 100 -> 200" in stop.value.message.splitlines()  # the diff is in today's names


def _composed(*overrides: str) -> tuple[str, dict[str, Any]]:
    """The fingerprint and protocol config of the real ``conf/`` with ``experiment=offline`` and ``overrides``."""
    from cts.compose.job_config import protocol_fingerprint

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=offline", *overrides])
    return protocol_fingerprint(cfg), protocol_config(cfg)


def _stored_before(config: dict[str, Any], fingerprint: str, tmp_path: Path) -> Path:
    """A job dir with records whose ``fingerprint.json`` holds ``config`` and the hash it had then."""
    (tmp_path / "fingerprint.json").write_text(json.dumps({"fingerprint": fingerprint, "config": config}))
    (tmp_path / "records.jsonl").write_text('{"id": "a"}\n', encoding="utf-8")
    return tmp_path


def test_a_dir_of_the_stats_node_resumes_as_bootstrap(tmp_path: Path) -> None:
    fingerprint, config = _composed()
    assert "bootstrap" in config and "stats" not in config  # the bootstrap settings are part of the protocol
    old = {("stats" if k == "bootstrap" else k): v for k, v in config.items()}
    job = _stored_before(old, "before-rename", tmp_path)
    check_resume(job, fingerprint, config)
    assert json.loads((job / "fingerprint.json").read_text())["migrated_from"] == ["before-rename"]
    _stored_before(old, "before-rename", tmp_path)
    changed_fingerprint, changed = _composed("bootstrap.n_resamples=500")
    with pytest.raises(ResumeRefused) as stop:  # a renamed key with another value is another protocol
        check_resume(job, changed_fingerprint, changed)
    assert "  bootstrap.n_resamples: 10000 -> 500" in stop.value.message.splitlines()


CONF = Path(__file__).resolve().parents[2] / "conf"


def _today(*overrides: str) -> dict[str, Any]:
    """The protocol config of the real ``conf/`` composed with ``overrides``, as ``fingerprint.json`` stores it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return json.loads(json.dumps(protocol_config(cfg), default=str))


def _resumes(tmp_path: Path, old: dict[str, Any], today: dict[str, Any]) -> bool:
    """Whether a dir of records stored under ``old`` resumes under ``today`` (False: refused)."""
    job = tmp_path / "job"
    job.mkdir(exist_ok=True)
    (job / "fingerprint.json").unlink(missing_ok=True)
    check_resume(job, "old0", old)
    (job / "records.jsonl").write_text('{"id": "a"}\n', encoding="utf-8")
    try:
        check_resume(job, "new1", today)
    except ResumeRefused:
        return False
    return True


def _model_spec_nodes(config: Any) -> list[dict[str, Any]]:
    found = [config] if isinstance(config, dict) and config.get("_target_") == "ModelSpec" else []
    children = config.values() if isinstance(config, dict) else config if isinstance(config, list) else ()
    return found + [node for child in children for node in _model_spec_nodes(child)]


def _before_the_model_renames(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` in the names before ``ModelSpec.id`` and ``services.llm.served_name`` (the inverse renames)."""
    old = copy.deepcopy(config)
    for node in _model_spec_nodes(old):
        node["model"] = node.pop("id")
    llm = old["services"]["llm"]
    llm["model"] = llm.pop("served_name")
    return old


@pytest.mark.parametrize("overrides", [("experiment=offline",), ("clarifier=gpt", "judge=claude", "search=webdancer")])
def test_a_dir_stored_before_the_model_renames_resumes(tmp_path: Path, overrides: tuple[str, ...]) -> None:
    today = _today(*overrides)
    old = _before_the_model_renames(today)
    assert old != today and "served_name" not in old["services"]["llm"]
    assert _resumes(tmp_path, old, today)
    changed = _before_the_model_renames(_today(*overrides, "services.llm.served_name=other"))
    assert not _resumes(tmp_path, changed, today)  # a changed value still refuses


def test_a_changed_litellm_id_under_its_old_key_still_refuses(tmp_path: Path) -> None:
    today = _today("clarifier=gpt")
    old = _before_the_model_renames(today)
    assert len(_model_spec_nodes(old)) >= 1
    assert _resumes(tmp_path, old, today)
    old["clarifier"]["model"]["model"] = "openai/gpt-5-mini"
    assert not _resumes(tmp_path, old, today)


def test_a_gold_build_stored_before_its_node_was_renamed_resumes(tmp_path: Path) -> None:
    paths = ("build_gold.instances=data/x.jsonl", "build_gold.out_dir=gold/x")
    today = _today("experiment=build_gold", *paths)
    assert today["build_gold"]["out_dir"] == "gold/x" and "gold" not in today
    old = {("gold" if key == "build_gold" else key): value for key, value in today.items()}
    assert _resumes(tmp_path, old, today)
    old["gold"] = {**old["gold"], "allow_partial": True}
    assert not _resumes(tmp_path, old, today)


# One table (cts/compat/renames.tsv) drives the stored-config migrations and the command line's error lines.

NEW_NAMES = {  # each rename, as a command line says its new name (composes today) and its old one (does not)
    "gold.fields": (
        ("experiment=build_gold", "dataset.fields.id=qid"),
        ("experiment=build_gold", "gold.fields.id=qid"),
    ),
    "search.max_tokens": (("search.max_output_tokens=256",), ("search.max_tokens=256",)),
    "stats": (("bootstrap.n_resamples=10",), ("stats.n_resamples=10",)),
    "services.llm.budget": (("services.llm.spend.max_usd=3",), ("services.llm.budget.max_usd=3",)),
    "model": (("clarifier=gpt", "clarifier.model.id=openai/x"), ("clarifier=gpt", "clarifier.model.model=openai/x")),
    "services.llm.model": (("services.llm.served_name=x",), ("services.llm.model=x",)),
    "gold": (
        ("experiment=build_gold", "build_gold.instances=d.jsonl"),
        ("experiment=build_gold", "gold.instances=d.jsonl"),
    ),
    "experiment=gold": (("experiment=build_gold",), ("experiment=gold",)),
    "task=gold": (("task=build_gold",), ("task=gold",)),
}


def test_the_migrations_are_the_protocol_renames_of_the_one_table() -> None:
    protocol = [r for r in renames.RENAMES if r.protocol]
    *by_rename, last = migrations.MIGRATIONS
    assert [m.what for m in by_rename] == [r.migration().what for r in protocol]
    assert last is migrations.NAMED_COMPONENTS  # then every stored _target_ path becomes its component's name
    assert {r.old for r in protocol if not r.target} == {
        "gold.fields",
        "search.max_tokens",
        "stats",
        "model",
        "services.llm.model",
        "gold",
    }
    stored = {
        "gold": {"fields": {"id": "qid"}, "out_dir": "o"},
        "search": {"max_tokens": None},
        "services": {"llm": {}},
    }
    assert migrate(stored) == {
        "build_gold": {"out_dir": "o"},
        "dataset": {"fields": {"id": "qid"}},
        "search": {"max_output_tokens": None},
        "services": {"llm": {}},
    }


@pytest.mark.parametrize("rename", [r for r in renames.RENAMES if r.old in NEW_NAMES], ids=lambda r: r.old)
def test_each_rename_is_real_today_s_name_composes_and_the_old_one_does_not(rename: renames.Rename) -> None:
    from hydra.errors import HydraException

    new, old = NEW_NAMES[rename.old]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        compose("config", overrides=list(new))
        with pytest.raises(HydraException):
            compose("config", overrides=list(old))
    fixed = renames.renamed_on_command_line(list(old), [CONF])
    assert len(fixed) == 1 and fixed[0].endswith("; use " + " ".join(o for o in new if o not in old)), fixed


def test_a_command_line_in_today_s_names_passes_and_a_user_s_own_old_option_is_kept(tmp_path: Path) -> None:
    today = ["-m", "experiment=build_gold", "build_gold.instances=x", "k=1,2", "dataset.gold_path=g", "plan=true"]
    assert renames.renamed_on_command_line(["--config-dir", "gold=x", *today], [CONF]) == []
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "gold.yaml").write_text("# @package _global_\n")
    assert renames.renamed_on_command_line(["experiment=gold"], [CONF, tmp_path]) == []  # the user's own preset
    swept = renames.renamed_on_command_line(["-m", "task=evaluate,gold"], [CONF])
    assert swept and swept[0].endswith("; use task=evaluate,build_gold")
    (hydra_key,) = renames.renamed_on_command_line(["~hydra.callbacks.mlflow_store"], [CONF])
    assert hydra_key.endswith("; use ~hydra.callbacks.cts")  # a Hydra key, not composable through compose()
    keys = {r.old for r in renames.RENAMES if not r.target}  # the paths: OLD_TARGETS below
    assert keys == {*NEW_NAMES, "hydra.callbacks.mlflow_store"}  # every rename tested


@pytest.mark.parametrize(
    ("command", "new"),
    [
        (["services.llm.model=x"], ["services.llm.served_name=x"]),
        (
            ["experiment=gold", "gold.instances=data.jsonl"],
            ["experiment=build_gold", "build_gold.instances=data.jsonl"],
        ),
        (["services.llm.budget.max_usd=5"], ["services.llm.spend.max_usd=5"]),
    ],
)
def test_a_command_of_last_week_gets_one_error_line_per_renamed_name(command: list[str], new: list[str]) -> None:
    import subprocess
    import sys

    proc = run_script([str(CONF.parent / "run.py"), *command], timeout=120)
    assert proc.returncode == 1 and not proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == len(command) and all(line.startswith("error: ") for line in lines), proc.stderr
    assert [line.rsplit("; use ", 1)[1] for line in lines] == new and "not in struct" not in proc.stderr


# The _target_ paths older job dirs store: old paths do not import, the migrations rename them.

OLD_TARGETS = {  # every retired path conf/ named since the first release, and what it names today
    "cts.app.evaluate_task": "cts.tasks.evaluate.evaluate_task",
    "cts.app.gold_task": "cts.tasks.build_gold.build_gold_task",
    "cts.tasks.gold.gold_task": "cts.tasks.build_gold.build_gold_task",
    "cts.robustness.backbone_stability_task": "cts.tasks.backbone_stability.backbone_stability_task",
    "cts.robustness.judge_robustness_task": "cts.tasks.judge_robustness.judge_robustness_task",
    "cts.robustness.TypeRestrictedUserAnswerer": "cts.roles.baselines.TypeRestrictedUserAnswerer",
    "cts.robustness.BracketRewriterBaseline": "cts.roles.baselines.BracketRewriterBaseline",
    "cts.robustness.ConcretisingRewriterBaseline": "cts.roles.baselines.ConcretisingRewriterBaseline",
    "cts.judge.LexicalJudge": "cts.roles.lexical.LexicalJudge",
    "cts.extract.RuleExtractor": "cts.roles.nuggets.RuleExtractor",
    "cts.qtypes.LexiconQuestionTyper": "cts.roles.qtyper.LexiconQuestionTyper",
    "cts.qtypes.LLMQuestionTyper": "cts.roles.qtyper.LLMQuestionTyper",
    "cts.callbacks.PrepareTrackingStore": "cts.compose.callbacks.LaunchCallbacks",
    "cts.compose.callbacks.PrepareTrackingStore": "cts.compose.callbacks.LaunchCallbacks",
}


@pytest.mark.parametrize("old", sorted(OLD_TARGETS))
def test_an_old_target_does_not_import_and_its_migration_names_today_s_object(old: str) -> None:
    from hydra.utils import get_object

    with pytest.raises(ImportError):
        get_object(old)
    assert renames.current_target(old) == OLD_TARGETS[old]
    assert get_object(renames.current_target(old)) is get_object(OLD_TARGETS[old])


def test_every_renamed_path_resolves_today_and_its_old_one_does_not() -> None:
    from types import ModuleType

    from hydra.utils import get_object

    modules = 0
    for rename in (r for r in renames.RENAMES if r.target):
        now = get_object(renames.current_target(rename.old))
        with pytest.raises(ImportError):
            get_object(rename.old)
        if isinstance(now, ModuleType):  # a module: every path under it moves
            modules += 1
            assert renames.current_target(rename.old + ".x.Y") == now.__name__ + ".x.Y"
    assert modules >= 30  # the restructure's moves


def test_a_stored_config_names_today_s_targets_and_only_whole_path_parts_match() -> None:
    stored = {
        "task": {"_target_": "cts.tasks.gold.gold_task"},
        "judge": {"_target_": "cts.judge.LexicalJudge", "threshold": 0.5},
        "hydra": {"callbacks": {"mlflow_store": {"_target_": "cts.callbacks.PrepareTrackingStore"}}},
        "search": {"tools": [{"_target_": "cts.io_of_mine.Tool"}, {"_target_": "cts.roles.rules.RuleRewriter"}]},
        "services": {"llm": {"budget": {"max_usd": 2}}},
    }
    assert migrate(stored)["judge"] == {"_target_": "LexicalJudge", "threshold": 0.5}  # protocol: by name
    assert migrations.migrate_job_config(stored) == {
        "task": {"_target_": "cts.tasks.build_gold.build_gold_task"},
        "judge": {"_target_": "cts.roles.lexical.LexicalJudge", "threshold": 0.5},
        "hydra": {"callbacks": {"cts": {"_target_": "cts.compose.callbacks.LaunchCallbacks"}}},
        "search": {"tools": [{"_target_": "cts.io_of_mine.Tool"}, {"_target_": "cts.roles.rules.RuleRewriter"}]},
        "services": {"llm": {"spend": {"max_usd": 2}}},
    }
    assert stored["task"] == {"_target_": "cts.tasks.gold.gold_task"}  # the stored config is left alone


def test_a_saved_job_config_of_an_older_version_loads_in_today_s_names(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from cts.compose.stored_config import load_job_config

    saved = tmp_path / "config.yaml"
    saved.write_text(
        "stats: {n_resamples: 100}\n"
        "clarifier: {model: {_target_: cts.llm.ModelSpec, model: x/y}}\n"
        "task: {_target_: cts.app.evaluate_task, out: '${paths.out}'}\n"
        "paths: {out: o}\n"
    )
    cfg = load_job_config(saved)
    assert OmegaConf.to_container(cfg, resolve=True) == {
        "bootstrap": {"n_resamples": 100},
        "clarifier": {"model": {"_target_": "cts.llm.ModelSpec", "id": "x/y"}},
        "task": {"_target_": "cts.tasks.evaluate.evaluate_task", "out": "o"},
        "paths": {"out": "o"},
    }
    assert OmegaConf.is_interpolation(cfg.task, "out")  # read as saved: interpolations stay


@pytest.mark.parametrize(
    ("command", "new"),
    [
        (["task._target_=cts.tasks.gold.gold_task"], "task._target_=cts.tasks.build_gold.build_gold_task"),
        (["+judge._target_=cts.judge.LexicalJudge"], "+judge._target_=cts.roles.lexical.LexicalJudge"),
        (["x._target_=cts.callbacks.PrepareTrackingStore"], "x._target_=cts.compose.callbacks.LaunchCallbacks"),
    ],
)
def test_an_old_target_on_the_command_line_is_told_today_s_path(command: list[str], new: str) -> None:
    (line,) = renames.renamed_on_command_line(command, [CONF])
    assert line.startswith(f"{command[0]}: ") and line.endswith(f"; use {new}"), line
    assert renames.renamed_on_command_line(["judge.note=cts.judge.LexicalJudge", f"t._target_={new}"], [CONF]) == []


def test_an_old_target_in_a_config_is_refused_with_today_s_path() -> None:
    from cts.compose.checks import unknown_key_problems
    from cts.tasks.registry import task_spec

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["judge._target_=cts.judge.LexicalJudge"])
    (problem,) = unknown_key_problems(cfg.judge, "judge")
    assert problem.startswith("judge._target_: cannot load cts.judge.LexicalJudge (")
    assert problem.endswith(
        "; cts.judge.LexicalJudge was renamed to cts.roles.lexical.LexicalJudge (cts/compat/renames.tsv)"
    )
    with pytest.raises(ValueError, match="was renamed to cts.tasks.build_gold.build_gold_task"):
        task_spec("cts.tasks.gold.gold_task")
