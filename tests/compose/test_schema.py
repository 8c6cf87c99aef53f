"""One typed schema per config node drives the value checks, the fingerprint and the guide (cts.compose.schema).

The resume tests write a job dir under today's schema and config, then add a key the way a
contributor would (a field in the node's schema, a default in the yaml) and resume: an
operational key keeps the fingerprint, an undeclared or protocol one refuses the dir.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_object
from omegaconf import DictConfig

from cts.compat.config import component_name, migrate
from cts.compose import job_config
from cts.compose.schema import KEYS, LLM, MOUNTS, Config, Services, _table, key, key_at, keys_of, reference
from cts.compose.schema._table import BEGIN, END, with_reference
from cts.compose.validate import value_problems
from cts.core.errors import ResumeRefused
from cts.tasks.job import check_resume

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
OFFLINE = "experiment=offline"


def composed(*overrides: str, conf: Path = CONF) -> DictConfig:
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose("config", overrides=list(overrides))


# --- a key added after job dirs exist ---------------------------------------------------------


@dataclass(frozen=True)
class LLMWithKnob(LLM):
    """``services.llm`` with one more operational key, declared as a contributor adds it."""

    warmup_calls: int = key("calls sent to warm an endpoint before the job", protocol=False, ge=0)


@dataclass(frozen=True)
class LLMWithProtocolKey(LLM):
    """``services.llm`` with one more key that changes what a job measures."""

    warmup_calls: int = key("calls sent to warm an endpoint before the job", ge=0)


def _declare(monkeypatch: pytest.MonkeyPatch, llm: type) -> None:
    """The schema table with ``services.llm`` declared as ``llm`` (every other schema as shipped)."""
    services = dataclasses.make_dataclass(
        "Services", [("llm", llm, key("the LLM runtime"))], bases=(Services,), frozen=True
    )
    root = dataclasses.make_dataclass(
        "Config", [("services", services, key("the shared services"))], bases=(Config,), frozen=True
    )
    mounts = (("", root), *MOUNTS[1:])
    monkeypatch.setattr(_table, "KEYS", tuple(k for mount, schema in mounts for k in keys_of(schema, mount)))


def _conf_with_knob(tmp_path: Path) -> Path:
    """A copy of ``conf/`` whose ``llm/default.yaml`` gives the new key its default."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    with (conf / "llm" / "default.yaml").open("a", encoding="utf-8") as f:
        f.write("warmup_calls: 2      # calls sent to warm an endpoint before the job\n")
    return conf


def _job_dir_of(cfg: DictConfig, tmp_path: Path) -> Path:
    """A job dir with one finished record, written under ``cfg``'s fingerprint."""
    job = tmp_path / "job"
    check_resume(job, job_config.protocol_fingerprint(cfg), job_config.protocol_config(cfg))
    (job / "records.jsonl").write_text('{"id": "a"}\n', encoding="utf-8")
    return job


def test_an_operational_key_added_later_keeps_the_fingerprint_and_the_dir_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = composed(OFFLINE)
    job = _job_dir_of(before, tmp_path)
    stored = json.loads((job / "fingerprint.json").read_text())
    after = composed(OFFLINE, conf=_conf_with_knob(tmp_path))
    assert after.services.llm.warmup_calls == 2

    undeclared = job_config.protocol_config(after)  # a key no schema declares counts as protocol
    assert undeclared["services"]["llm"]["warmup_calls"] == 2
    with pytest.raises(ResumeRefused):
        check_resume(job, job_config.protocol_fingerprint(after), undeclared)

    _declare(monkeypatch, LLMWithKnob)
    assert job_config.protocol_fingerprint(after) == stored["fingerprint"]
    check_resume(job, job_config.protocol_fingerprint(after), job_config.protocol_config(after))
    assert json.loads((job / "fingerprint.json").read_text()) == stored  # resumed as it was, no migration
    refused = value_problems(composed(OFFLINE, "services.llm.warmup_calls=-1", conf=tmp_path / "conf"))
    assert refused == [
        "services.llm.warmup_calls: must be an integer >= 0 (calls sent to warm an endpoint before the job), got -1"
    ]


def test_a_protocol_key_added_later_refuses_the_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job_dir_of(composed(OFFLINE), tmp_path)
    _declare(monkeypatch, LLMWithProtocolKey)
    after = composed(OFFLINE, conf=_conf_with_knob(tmp_path))
    with pytest.raises(ResumeRefused) as refused:
        check_resume(job, job_config.protocol_fingerprint(after), job_config.protocol_config(after))
    assert "services.llm.warmup_calls" in refused.value.message


@pytest.mark.parametrize(
    ("change", "resumes"),
    [
        ("concurrency=2", True),
        ("services.llm.timeout_s=5", True),
        ("services.llm.cache.mode=off", True),
        ("dataset.cluster_field=topic", True),
        ("k=2", False),
        ("judge.full=0.9", False),
        ("services.llm.max_reasks=0", False),
        ("bootstrap.n_resamples=500", False),
    ],
)
def test_an_operational_change_resumes_and_a_protocol_change_refuses(
    tmp_path: Path, change: str, resumes: bool
) -> None:
    job = _job_dir_of(composed(OFFLINE), tmp_path)
    later = composed(OFFLINE, change)
    resume = lambda: check_resume(job, job_config.protocol_fingerprint(later), job_config.protocol_config(later))  # noqa: E731
    if resumes:
        resume()
    else:
        with pytest.raises(ResumeRefused):
            resume()


# --- component names in the fingerprint -------------------------------------------------------


def _targets(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["_target_"]] if isinstance(node.get("_target_"), str) else []
        return own + [t for v in node.values() for t in _targets(v)]
    return [t for v in node for t in _targets(v)] if isinstance(node, list) else []


def _shipped_targets() -> set[str]:
    """Every ``_target_`` of the shipped options (each group's options, the presets, the models)."""
    from omegaconf import OmegaConf

    options = [
        f"{g.name}={p.stem}"
        for g in CONF.iterdir()
        if g.is_dir() and g.name not in {"hydra", "paths", "tracking", "llm", "model"}
        for p in g.glob("*.yaml")
    ]
    options += [f"search/provider={p.stem}" for p in (CONF / "search/provider").glob("*.yaml")]
    options += [f"clarifier={p.stem}" for p in (CONF / "model").glob("*.yaml")] + ["judge=panel"]
    found: set[str] = set()
    for option in options:
        extra = ("build_gold.instances=x", "build_gold.out_dir=y") if option == "experiment=build_gold" else ()
        try:
            cfg = composed(option, *extra)
        except Exception:  # noqa: BLE001 - an option that needs values on the command line (dataset=jsonl)
            continue
        found.update(_targets(OmegaConf.to_container(cfg, resolve=False)))
    return found


def test_components_count_by_name_and_each_name_is_one_component() -> None:
    targets = {t for t in _shipped_targets() if t.startswith("cts.")}
    assert len(targets) > 25
    names = {component_name(t): t for t in targets}
    assert len(names) == len(targets), "two cts components share a name: the fingerprint would not tell them apart"
    for name, target in names.items():
        assert get_object(target).__name__ == name
    assert component_name("mylab.roles.MyClarifier") == "mylab.roles.MyClarifier"  # your own package: its path


def test_a_module_move_keeps_the_fingerprint(tmp_path: Path) -> None:
    cfg = composed(OFFLINE)
    config = job_config.protocol_config(cfg)
    assert {t for t in _targets(config)} >= {"RuleClarifier", "LexicalJudge"}
    old = json.loads(json.dumps(config).replace('"RuleClarifier"', '"cts.clarifiers.RuleClarifier"'))
    old = json.loads(json.dumps(old).replace('"LexicalJudge"', '"cts.roles.lexical.LexicalJudge"'))
    assert migrate(old) == config  # a dir stored with module paths reads in today's names
    job = tmp_path / "job"
    job.mkdir()
    (job / "fingerprint.json").write_text(json.dumps({"fingerprint": "paths0", "config": old}))
    (job / "records.jsonl").write_text('{"id": "a"}\n', encoding="utf-8")
    check_resume(job, job_config.protocol_fingerprint(cfg), config)
    assert json.loads((job / "fingerprint.json").read_text())["migrated_from"] == ["paths0"]
    old["judge"]["full"] = 0.5
    (job / "fingerprint.json").write_text(json.dumps({"fingerprint": "paths0", "config": old}))
    with pytest.raises(ResumeRefused):
        check_resume(job, job_config.protocol_fingerprint(cfg), config)


# --- one schema, one place ---------------------------------------------------------------------

DECLARED_WHOLE = ("services.llm", "bootstrap", "plan", "tracking")
"""Nodes whose every key is declared (no key of them counts as protocol by default)."""


@pytest.mark.parametrize("node", DECLARED_WHOLE)
def test_every_key_of_the_fixed_nodes_is_declared(node: str) -> None:
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.select(composed(), node), resolve=False)
    assert isinstance(data, dict)

    def undeclared(tree: dict[str, Any], prefix: str) -> list[str]:
        out = []
        for name, value in tree.items():
            info = key_at(f"{prefix}.{name}")
            if info is None or not info.path.startswith(node):
                out.append(f"{prefix}.{name}")
            elif isinstance(value, dict) and info.node is not None:
                out += undeclared(value, f"{prefix}.{name}")
        return out

    assert undeclared(data, node) == []
    local = OmegaConf.to_container(composed("experiment=local_llm").services.local_llm, resolve=False)
    assert isinstance(local, dict) and {"n_ctx", "port", "startup_timeout_s"} <= set(local)


def test_k_is_bounded_once() -> None:
    (k,) = [info for info in KEYS if info.path == "k"]
    (budgets,) = [info for info in KEYS if info.path == "robustness.budgets.*"]
    assert k.check is not None and budgets.check is not None
    accepted = [v for v in range(-2, 7) if k.check.test(v)]
    assert accepted == [1, 2, 3] == [v for v in range(-2, 7) if budgets.check.test(v)]
    assert value_problems(composed("k=4")) == [
        "k: must be an integer from 1 to 3 (the protocol's clarification budget), got 4"
    ]


def test_the_guide_s_key_reference_is_the_schemas() -> None:
    """After a schema change: ``python -m cts.compose.schema`` rewrites the table in docs/reference.md."""
    guide = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    assert BEGIN in guide and END in guide
    assert with_reference(guide) == guide
    table = reference()
    for info in KEYS:
        if info.check is not None or info.node is not None:
            assert f"| `{info.path}` |" in table
    assert "| `services.llm.timeout_s` | float | `120.0` | a number > 0 | operational |" in table
    assert "| `k` | int | `1` | an integer from 1 to 3 | protocol |" in table
    assert "| `search.top_k` | int |  | an integer >= 1 | protocol |" in table  # an option's value: no default
