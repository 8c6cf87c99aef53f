"""The demo dataset mined from the offline corpus, and its on-disk cache."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

import cts.demo.loading
from cts.compose.services import Services
from cts.core.types import Instance
from cts.demo.cli import main
from cts.demo.loading import demo_dir, load_demo
from cts.demo.mining import DEMO_VERSION, KINDS, build_lexicons, classify_qualifier
from cts.demo.selection import build_demo_instances, kind_counts


@pytest.fixture(scope="module")
def instances(services: Services) -> list[Instance]:
    return build_demo_instances(services.corpus, services.index, n=200, seed=0)


def test_generation_is_deterministic(services: Services, instances: list[Instance]) -> None:
    again = build_demo_instances(services.corpus, services.index, n=200, seed=0)
    assert again == instances
    other = build_demo_instances(services.corpus, services.index, n=200, seed=1)
    assert [i.fused_query for i in other] != [i.fused_query for i in instances]


def test_enough_instances_balanced_over_every_kind(instances: list[Instance]) -> None:
    assert len(instances) >= 150
    assert [i.id for i in instances] == [f"demo-{k:04d}" for k in range(1, len(instances) + 1)]
    counts = kind_counts(instances)
    assert set(counts) == set(KINDS)
    assert min(counts.values()) >= 20
    assert len({i.meta["intended_doc"] for i in instances}) == len(instances)
    assert len({i.fused_query for i in instances}) == len(instances)


def test_blurred_drops_exactly_the_qualifier(instances: list[Instance]) -> None:
    for i in instances:
        head, qualifier = i.meta["head"], i.meta["qualifier"]
        assert head in i.blurred_query and head in i.fused_query, i
        assert qualifier in i.fused_query, i
        assert qualifier.lower() not in i.blurred_query.lower(), i
        assert i.meta["language"] == "en"


def test_intended_doc_ranks_first_for_the_fused_query(services: Services, instances: list[Instance]) -> None:
    for i in instances:
        assert services.index.search(i.fused_query, 1)[0].doc.id == i.meta["intended_doc"]
    # The set is not trivial: for many, the blurred query misses the intended article.
    assert sum(i.meta["blurred_rank"] != 1 for i in instances) >= len(instances) // 3


def test_most_intents_name_no_place(services: Services, instances: list[Instance]) -> None:
    geography = {re.sub(r" \(.*\)$", "", t) for t in (d.title for d in services.corpus.docs if d.topic == "Geography")}
    pattern = re.compile(
        "|".join(rf"(?<![\w-]){re.escape(g)}(?![\w-])" for g in sorted(geography, key=len, reverse=True))
    )
    placeless = [i for i in instances if not pattern.search(i.fused_query)]
    assert len(placeless) > len(instances) // 2
    assert sum(i.meta["place"] is None for i in instances) > len(instances) // 2
    assert all(
        i.meta["place"] for i in instances if i.meta["ambiguity"] == "region" and i.meta["source"] == "placed_title"
    )


@pytest.mark.parametrize(
    ("title", "kind"),
    [
        ("Mercury (planet)", "sense"),
        ("Crane (bird)", "sense"),
        ("Psycho (1960 film)", "description"),
        ("Dune (novel)", "description"),
        ("Republic (Plato)", "creator"),
        ("Leviathan (Hobbes book)", "creator"),
        ("Nocturnes (Chopin)", "creator"),
        ("Jin dynasty (266–420)", "time"),
        ("Eastern Front (World War II)", "time"),
        ("Great Famine (Ireland)", "region"),
        ("New York (state)", "region"),
        ("Galicia (Spain)", "region"),
    ],
)
def test_qualifier_rules(services: Services, title: str, kind: str) -> None:
    doc = services.corpus.by_title(title)
    assert doc is not None
    qualifier = re.fullmatch(r".+ \((.+)\)", title).group(1)  # type: ignore[union-attr]
    assert classify_qualifier(qualifier, doc, build_lexicons(services.corpus)) == kind


def test_load_demo_builds_once_then_reuses_the_cache(
    services: Services, instances: list[Instance], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = Services(cache_dir=tmp_path, settings={"corpus_lang": "en-us"})
    local.memo("index", lambda: services.index)  # share the session index: only the demo is new
    data = load_demo(local.corpus, local.index, local.cache_dir, n=200, seed=0)
    path = demo_dir(local.corpus, local.cache_dir, 200, 0)
    assert path.parent.parent == tmp_path and (path / "instances.jsonl").is_file()
    assert list(data.instances) == instances
    assert set(data.gold) == {i.id for i in instances}
    for i in data.instances:
        nuggets = data.gold[i.id].nuggets
        assert nuggets and nuggets[0].evidence_ids == (i.meta["intended_doc"],)

    def no_rebuild(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached demo set was rebuilt")

    monkeypatch.setattr(cts.demo.loading, "_build_demo", no_rebuild)
    again = load_demo(local.corpus, local.index, local.cache_dir, n=200, seed=0)
    assert again.instances == data.instances and again.gold == data.gold


def test_cli_prints_location_and_kind_counts(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--n", "25", "--seed", "3", "--cache-dir", str(cache_dir)])
    out = capsys.readouterr().out
    assert f"{DEMO_VERSION}-n25-s3-" in out and "instances: 25" in out
    counts = Counter(line.split()[0] for line in out.splitlines() if line.startswith("  "))
    assert set(counts) == set(KINDS)


def test_demo_gold_is_an_archive_whose_nuggets_cite_traced_evidence(services: Services) -> None:
    import json

    from cts.gold import load_gold

    data = load_demo(services.corpus, services.index, services.cache_dir, n=200, seed=0)
    path = demo_dir(services.corpus, services.cache_dir, 200, 0)
    runs = {}
    for line in (path / "gold_runs.jsonl").read_text(encoding="utf-8").splitlines():
        run = json.loads(line)
        runs[run["id"]] = {e["id"] for e in run["evidence"]}
    assert load_gold(path / "gold.jsonl") == dict(data.gold)  # validates (incl. the manifest hash)
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["counts"]["gold"] == len(data.instances)
    for instance_id, gold in data.gold.items():
        traced = runs[instance_id]
        assert {e.id for e in gold.evidence} <= traced
        assert all(set(n.evidence_ids) <= traced and n.evidence_ids for n in gold.nuggets)
