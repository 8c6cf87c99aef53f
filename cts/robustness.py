"""Robustness analyses over frozen runs: judge backbones (Table 9) and UA/Rewriter backbones (Table 11).

Both tasks read the records of existing runs (a sweep dir, job dirs or an
MLflow experiment: ``robustness.source``) and never call a Clarifier or a
search backend.

* ``judge_robustness_task`` re-judges the frozen answers of every system and
  orig arm with each judge of ``robustness.judges`` and reports each system's
  score per judge, whether the ordering of systems matches the reference
  judge's, Kendall's tau between the rankings, and Cohen's kappa on the
  per-nugget full/partial/none labels of every pair of judges.
* ``backbone_stability_task`` replays the frozen clarification questions with
  each UA/Rewriter backbone of ``robustness.backbones`` and reports, per pair
  of backbones, known/unknown agreement of the UA answers and the normalised
  similarity of the rewrites; per backbone, the unknown rate, the
  unknown-preservation rate and the unsupported-concretisation rate.

Tables go to ``cfg.paths.output_dir`` as Markdown, CSV and LaTeX, plus a flat
``robustness_metrics.json``.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import itertools
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from cts.app import build_node as build
from cts.app import log_task_run
from cts.roles.rules import place_lexicon as corpus_places
from cts.qtypes import (
    BUILTIN_PLACES_EN,
    BUILTIN_PLACES_ZH,
    classify_question,
    place_pattern,
)
from cts.records import Record
from cts.report import ORIG, Job, Table, load_jobs, markdown, write_table
from cts.scoring import restore_score
from cts.stats import cohen_kappa, kendall_tau
from cts.text import STOPWORDS_EN, tokenize
from cts.types import (
    LABELS,
    QA,
    UNKNOWN,
    BudgetExceeded,
    CallError,
    Gold,
    Instance,
    Judge,
    Label,
    Rewriter,
    UnscoredError,
    UserAnswerer,
)

log = logging.getLogger(__name__)

RECORDED = "recorded"
"""Pseudo-judge name for the labels stored in the source records (the run's own judge)."""
T = TypeVar("T")
NAN = float("nan")


async def bounded(calls: Iterable[Callable[[], Awaitable[T]]], concurrency: int) -> list[T]:
    """Await every call with at most ``concurrency`` in flight; results in call order."""
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with sem:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls)))


def write_tables(tables: Sequence[Table], out_dir: Path, title: str) -> list[Path]:
    """Write each table (CSV/MD/TeX) and one Markdown page ``<title>.md`` with all of them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [p for t in tables for p in write_table(t, out_dir)]
    page = out_dir / f"{title}.md"
    page.write_text("\n".join([f"# {title}\n"] + [f"## {t.caption}\n\n{markdown(t.display)}" for t in tables]),
                    encoding="utf-8")
    return [*files, page]


def _source(cfg: Any) -> Any:
    source = cfg.robustness.source
    return list(source) if type(source).__name__ == "ListConfig" else source


def select_budgets(jobs: Sequence[Job], budgets: Sequence[int] | None) -> list[Job]:
    """The jobs whose k is in ``budgets`` (all jobs when None)."""
    if budgets is None:
        return list(jobs)
    chosen = [j for j in jobs if j.k in {int(b) for b in budgets}]
    if not chosen:
        raise ValueError(f"no source job has k in {list(budgets)}")
    return chosen


# ============================================================================ judges


@dataclass(frozen=True)
class FrozenArm:
    """One frozen answer to re-judge, and the system it belongs to."""

    system: str
    """``orig`` or ``<label>-k<k>``."""
    instance_id: str
    answer: str
    recorded: Mapping[str, Label] = field(default_factory=dict)
    """The labels the source run's judge gave."""

    @property
    def key(self) -> tuple[str, str]:
        """Identity of the judging work: identical answers to one instance are judged once."""
        return self.instance_id, self.answer


def system_name(job: Job) -> str:
    """Display name of a job's system arm in Table 9 (``rules_scope-k1``)."""
    return ORIG if job.is_orig else f"{job.label}-k{job.k}"


def _judgeable(arm: Any) -> bool:
    # An arm whose search failed has no answer; one whose judge failed does.
    return arm is not None and (arm.error is None or arm.error.stage == "judge")


def frozen_arms(jobs: Sequence[Job]) -> list[FrozenArm]:
    """Every judgeable system and orig answer of ``jobs`` (orig arms pooled as ``orig``)."""
    arms: list[FrozenArm] = []
    for job in jobs:
        for r in job.records:
            if _judgeable(r.orig):
                arms.append(FrozenArm(ORIG, r.id, r.orig.answer, dict(r.orig.labels)))  # type: ignore[union-attr]
            if not job.is_orig and _judgeable(r.system):
                arms.append(FrozenArm(system_name(job), r.id, r.system.answer, dict(r.system.labels)))  # type: ignore[union-attr]
    return arms


async def judge_all(
    arms: Sequence[FrozenArm], gold: Mapping[str, Gold], judges: Mapping[str, Judge], concurrency: int = 8
) -> dict[str, dict[tuple[str, str], Mapping[str, Label] | None]]:
    """Labels per judge per unique (instance, answer); None where the judge failed."""
    keys = list(dict.fromkeys(a.key for a in arms if a.instance_id in gold))

    def call(judge: Judge, key: tuple[str, str]) -> Callable[[], Awaitable[Mapping[str, Label] | None]]:
        async def run() -> Mapping[str, Label] | None:
            try:
                return await judge.judge(key[1], gold[key[0]].nuggets)
            except BudgetExceeded:
                raise  # the spending cap stops the analysis, it does not unscore items
            except Exception as e:  # noqa: BLE001 - an unscored item is excluded, never 0
                log.warning("judge failed on %s: %s", key[0], e)
                return None

        return run

    out = {}
    for name, judge in judges.items():
        labels = await bounded([call(judge, key) for key in keys], concurrency)
        out[name] = dict(zip(keys, labels))
    return out


def _score(labels: Mapping[str, Label] | None, gold: Gold) -> float | None:
    if not labels:
        return None
    try:
        return restore_score(labels, gold.nuggets)
    except ValueError:  # labels of another gold version (missing nugget ids)
        return None


def score_frame(
    arms: Sequence[FrozenArm], gold: Mapping[str, Gold], labels: Mapping[str, Mapping[tuple[str, str], Any]]
) -> pd.DataFrame:
    """Long table ``judge, system, instance_id, score`` (orig answers of one instance averaged)."""
    rows = [
        {"judge": j, "system": a.system, "instance_id": a.instance_id,
         "score": _score(by_key.get(a.key), gold[a.instance_id])}
        for j, by_key in labels.items() for a in arms if a.instance_id in gold
    ]
    df = pd.DataFrame(rows, columns=["judge", "system", "instance_id", "score"])
    df["score"] = df["score"].astype(float)
    return df.groupby(["judge", "system", "instance_id"], sort=False, as_index=False)["score"].mean()


def system_means(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean score per judge (rows) and system (columns) over instances every judge scored."""
    wide = scores.pivot_table(index=["system", "instance_id"], columns="judge", values="score", aggfunc="mean")
    common = wide.dropna()
    means = common.groupby(level="system").mean().T
    means = means.loc[[j for j in dict.fromkeys(scores["judge"]) if j in means.index]]  # config order
    systems = [ORIG] + sorted(s for s in means.columns if s != ORIG)
    return means[[s for s in systems if s in means.columns]]


def ordering(means: pd.Series) -> str:
    """``A > B = C`` from best to worst (equal means within 1e-9 are ties)."""
    ranked = means.sort_values(ascending=False, kind="stable")
    text, last = "", None
    for system, value in ranked.items():
        if last is not None:
            text += " = " if math.isclose(value, last, abs_tol=1e-9) else " > "
        text += str(system)
        last = value
    return text


def _rank_key(means: pd.Series) -> tuple[tuple[str, ...], ...]:
    groups: dict[float, list[str]] = {}
    for system, value in means.items():
        groups.setdefault(round(float(value), 9), []).append(str(system))
    return tuple(tuple(sorted(groups[v])) for v in sorted(groups, reverse=True))


def table9(means: pd.DataFrame, reference: str) -> Table:
    """Table 9: score of each system per judge, ordering, same-as-reference, tau vs reference."""
    ref = means.loc[reference]
    data = means.copy()
    data.insert(0, "judge", data.index)
    data["ordering"] = [ordering(means.loc[j]) for j in means.index]
    data["same_ordering"] = [_rank_key(means.loc[j]) == _rank_key(ref) for j in means.index]
    data["kendall_tau"] = [kendall_tau(ref.values, means.loc[j].values) for j in means.index]
    data = data.reset_index(drop=True)
    display = pd.DataFrame({"Judge": data["judge"]})
    for s in means.columns:
        display[s] = data[s].map(lambda v: "–" if not math.isfinite(v) else f"{v:.2f}")
    display["Ordering"] = data["ordering"]
    display[f"same as {reference}"] = data["same_ordering"].map({True: "yes", False: "no"})
    display["Kendall τ"] = data["kendall_tau"].map(lambda v: "–" if not math.isfinite(v) else f"{v:.3f}")
    caption = (f"Table 9. Judge robustness: mean restore_score_100 per system under each judge "
               f"(instances scored by every judge); ordering and Kendall's tau vs. {reference}.")
    return Table("judge_table9", caption, data, display)


def tau_table(means: pd.DataFrame) -> Table:
    """Kendall's tau between the system rankings of every pair of judges."""
    rows = [{"judge_a": a, "judge_b": b, "n_systems": len(means.columns),
             "kendall_tau": kendall_tau(means.loc[a].values, means.loc[b].values)}
            for a, b in itertools.combinations(means.index, 2)]
    data = pd.DataFrame(rows, columns=["judge_a", "judge_b", "n_systems", "kendall_tau"])
    display = data.assign(kendall_tau=data["kendall_tau"].map(lambda v: "–" if not math.isfinite(v) else f"{v:.3f}"))
    return Table("judge_tau", "Kendall's tau between the system rankings of each pair of judges.", data, display)


def kappa_table(labels: Mapping[str, Mapping[tuple[str, str], Mapping[str, Label] | None]]) -> Table:
    """Cohen's kappa on full/partial/none per nugget, for every pair of judges."""
    rows = []
    for a, b in itertools.combinations(labels, 2):
        pairs = [(la[n], lb[n])
                 for key, la in labels[a].items() if la and (lb := labels[b].get(key))
                 for n in la if n in lb]
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        agree = float(np.mean([x == y for x, y in pairs])) if pairs else NAN
        rows.append({"judge_a": a, "judge_b": b, "n_labels": len(pairs), "agreement": agree,
                     "kappa": cohen_kappa(xs, ys, LABELS)})
    data = pd.DataFrame(rows, columns=["judge_a", "judge_b", "n_labels", "agreement", "kappa"])
    fmt = {c: (lambda v: "–" if not math.isfinite(v) else f"{v:.3f}") for c in ("agreement", "kappa")}
    display = data.assign(**{c: data[c].map(f) for c, f in fmt.items()})
    return Table("judge_kappa", "Per-nugget agreement (full/partial/none) between judges: raw agreement and "
                 "Cohen's kappa.", data, display)


def recorded_labels(arms: Sequence[FrozenArm]) -> dict[tuple[str, str], Mapping[str, Label] | None]:
    """The source runs' own labels per (instance, answer), as a pseudo-judge."""
    return {a.key: (dict(a.recorded) or None) for a in arms}


async def rejudge(
    jobs: Sequence[Job], gold: Mapping[str, Gold], judges: Mapping[str, Judge], *,
    include_recorded: bool = True, concurrency: int = 8,
) -> tuple[pd.DataFrame, dict[str, dict[tuple[str, str], Mapping[str, Label] | None]]]:
    """Re-judge the frozen answers of ``jobs``: per-instance scores and labels per judge."""
    arms = frozen_arms(jobs)
    missing = {a.instance_id for a in arms} - set(gold)
    if missing:
        log.warning("%d instance(s) of the source runs have no gold and are skipped", len(missing))
    labels = await judge_all(arms, gold, judges, concurrency)
    if include_recorded:
        labels = {RECORDED: recorded_labels(arms), **labels}
    return score_frame(arms, gold, labels), labels


def judge_report(
    scores: pd.DataFrame, labels: Mapping[str, Mapping[tuple[str, str], Any]], reference: str
) -> list[Table]:
    """Table 9, the pairwise tau table and the kappa table."""
    means = system_means(scores)
    if reference not in means.index:
        raise ValueError(f"reference judge {reference!r} is not among {list(means.index)}")
    return [table9(means, reference), tau_table(means), kappa_table(labels)]


def judge_robustness_task(cfg: Any, services: Any) -> None:
    """Task ``judge_robustness``: re-judge frozen answers with ``robustness.judges``.

    Reads ``robustness.source`` (sweep dir, job dirs or MLflow experiment),
    ``robustness.budgets`` (the k values to keep; None = all), ``robustness.judges``
    (name -> judge config), ``robustness.reference`` (default: the first judge) and
    ``robustness.include_recorded``; gold comes from ``cfg.dataset``. Writes tables
    to ``cfg.paths.output_dir``.
    """
    rcfg = cfg.robustness
    jobs = select_budgets(load_jobs(_source(cfg), cfg.tracking.uri), rcfg.get("budgets"))
    gold = build(cfg.dataset, services).gold
    judges = {name: build(node, services) for name, node in rcfg.judges.items()}
    reference = rcfg.get("reference") or next(iter(judges))
    scores, labels = asyncio.run(rejudge(jobs, gold, judges, include_recorded=rcfg.get("include_recorded", True),
                                         concurrency=cfg.get("concurrency", 8)))
    out = Path(cfg.paths.output_dir)
    tables = judge_report(scores, labels, reference)
    scores.to_csv(out / "judge_scores.csv", index=False)
    files = write_tables(tables, out, "judge_robustness")
    metrics = judge_metrics(tables)
    files += [write_metrics(metrics, out), out / "judge_scores.csv"]
    log_task_run(cfg, "judge_robustness", metrics, files)
    print(markdown(tables[0].display), flush=True)


def judge_metrics(tables: Sequence[Table]) -> dict[str, float]:
    """Flat metrics: ``tau.<judge>``, ``same_ordering.<judge>``, ``kappa.<a>.<b>``."""
    t9, _, kappa = tables
    out = {f"tau.{r.judge}": float(r.kendall_tau) for r in t9.data.itertuples()}
    out.update({f"same_ordering.{r.judge}": float(r.same_ordering) for r in t9.data.itertuples()})
    out.update({f"kappa.{r.judge_a}.{r.judge_b}": float(r.kappa) for r in kappa.data.itertuples()})
    return out


def write_metrics(metrics: Mapping[str, float], out_dir: Path) -> Path:
    """Write ``robustness_metrics.json`` (non-finite values as null)."""
    path = out_dir / "robustness_metrics.json"
    clean = {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}
    path.write_text(json.dumps(clean, indent=2, ensure_ascii=False), encoding="utf-8")
    return path


# ============================================================================ backbones


@dataclass(frozen=True)
class FrozenItem:
    """Frozen clarification questions for one instance, replayed with every backbone."""

    instance: Instance
    questions: tuple[str, ...]
    types: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Replay:
    """What one backbone made of one frozen item."""

    answers: tuple[str, ...]
    rewrite: str


@dataclass(frozen=True)
class Backbone:
    """A UA + Rewriter pair."""

    ua: UserAnswerer
    rewriter: Rewriter


def frozen_items(jobs: Sequence[Job], instances: Iterable[Instance]) -> list[FrozenItem]:
    """Unique (instance, questions) of the clarified records of ``jobs``."""
    by_id = {i.id: i for i in instances}
    items: dict[tuple[str, tuple[str, ...]], FrozenItem] = {}
    for job in jobs:
        for r in job.records:
            if r.questions and r.id in by_id:
                items.setdefault((r.id, r.questions), FrozenItem(by_id[r.id], r.questions, _types(r)))
    return list(items.values())


def _types(r: Record) -> tuple[tuple[str, ...], ...]:
    return tuple(r.question_types[i] if i < len(r.question_types) else classify_question(q)
                 for i, q in enumerate(r.questions))


async def replay(item: FrozenItem, backbone: Backbone) -> Replay:
    """Answer the frozen questions and rewrite, exactly as the protocol does."""
    answers = await asyncio.gather(*(backbone.ua.answer(item.instance.fused_query, q) for q in item.questions))
    qa = [QA(q, a) for q, a in zip(item.questions, answers)]
    return Replay(tuple(answers), await backbone.rewriter.rewrite(item.instance.blurred_query, qa))


_YEAR = re.compile(r"(?<!\d)(?:1[5-9]\d{2}|20\d{2})(?!\d)")
_CAPITALISED = re.compile(r"(?<![\w'’-])[A-Z][\w'’-]*(?:\s+(?:of|de|the|and|&)?\s*[A-Z][\w'’-]*)*")
_QUOTED = re.compile(r"《([^》]+)》|“([^”]+)”|\"([^\"]+)\"")
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+)$")


@dataclass(frozen=True)
class Concretiser:
    """Finds years, places and entities a rewrite adds that no source text contains."""

    places: re.Pattern[str]

    @classmethod
    def from_places(cls, places: Iterable[str]) -> Concretiser:
        """Build from a place lexicon (see :func:`place_lexicon`)."""
        return cls(place_pattern(tuple(places)))

    def added(self, rewrite: str, sources: Sequence[str]) -> dict[str, set[str]]:
        """New terms of ``rewrite`` by kind (``year``, ``region``, ``entity``)."""
        src = " \n ".join(sources)
        low, src_tokens = src.lower(), set(tokenize(src))
        years = {y for y in _YEAR.findall(rewrite) if y not in src}
        places = {m.group(0) for m in self.places.finditer(rewrite) if m.group(0).lower() not in low}
        entities = {e for e in self._entities(rewrite) if not self._supported(e, low, src_tokens)}
        entities -= places | years
        entities = {e for e in entities if not any(p in e or e in p for p in places)}
        return {"year": years, "region": places, "entity": entities}

    @staticmethod
    def _entities(text: str) -> set[str]:
        found = {next(g for g in m.groups() if g) for m in _QUOTED.finditer(text)}
        for m in _CAPITALISED.finditer(text):
            words = m.group(0).split()
            if _SENTENCE_START.search(text[: m.start()]):  # "Best ..." opening a sentence is not a name
                words = words[1:]
                while words and not words[0][0].isupper():  # "of China" -> "China"
                    words = words[1:]
            if words:
                found.add(" ".join(words))
        return {e.strip() for e in found if e.strip() and e.strip().lower() not in STOPWORDS_EN}

    @staticmethod
    def _supported(entity: str, low_src: str, src_tokens: set[str]) -> bool:
        if entity.lower() in low_src:
            return True
        tokens = [t for t in tokenize(entity) if t not in STOPWORDS_EN]
        return bool(tokens) and all(t in src_tokens for t in tokens)


_KINDS_OF_TYPE = {"region": ("region",), "time": ("year",)}


def preserved(item: FrozenItem, out: Replay, added: Mapping[str, set[str]]) -> list[bool]:
    """Per unknown turn: whether the rewrite left that aspect unconcretised.

    A region question answered ``unknown`` is broken by a new place, a time question
    by a new year, any other question by a new entity.
    """
    flags = []
    for types, answer in zip(item.types, out.answers):
        if answer != UNKNOWN:
            continue
        kinds = {k for t in types for k in _KINDS_OF_TYPE.get(t, ("entity",))}
        flags.append(not any(added[k] for k in kinds))
    return flags


def backbone_rows(
    items: Sequence[FrozenItem], outputs: Mapping[str, Sequence[Replay]], concretiser: Concretiser
) -> pd.DataFrame:
    """Per backbone: unknown rate, unknown preservation, unsupported concretisation."""
    rows = []
    for name, outs in outputs.items():
        answers = [a for o in outs for a in o.answers]
        keep: list[bool] = []
        unsupported: list[bool] = []
        for item, out in zip(items, outs):
            known = [a for a in out.answers if a != UNKNOWN]
            added = concretiser.added(out.rewrite, [item.instance.blurred_query, *known])
            keep += preserved(item, out, added)
            unsupported.append(any(added.values()))
        rows.append({"backbone": name, "n_items": len(outs), "n_answers": len(answers),
                     "unknown_rate": _mean([a == UNKNOWN for a in answers]),
                     "unknown_preservation": _mean(keep), "unsupported_concretisation": _mean(unsupported)})
    return pd.DataFrame(rows, columns=["backbone", "n_items", "n_answers", "unknown_rate",
                                       "unknown_preservation", "unsupported_concretisation"])


def _mean(flags: Sequence[bool] | Sequence[float]) -> float:
    return float(np.mean(flags)) if flags else NAN


def rewrite_similarity(a: str, b: str) -> float:
    """Normalised similarity of two rewrites: difflib ratio over CJK-aware tokens."""
    ta, tb = tokenize(a), tokenize(b)
    if not ta and not tb:
        return 1.0
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio()


def pair_rows(outputs: Mapping[str, Sequence[Replay]], per_backbone: pd.DataFrame) -> pd.DataFrame:
    """Table 11: UA known/unknown agreement, rewrite similarity, unknown preservation per pair."""
    keep = per_backbone.set_index("backbone")["unknown_preservation"]
    rows = []
    for a, b in itertools.combinations(outputs, 2):
        agree = [(x == UNKNOWN) == (y == UNKNOWN)
                 for oa, ob in zip(outputs[a], outputs[b]) for x, y in zip(oa.answers, ob.answers)]
        sims = [rewrite_similarity(oa.rewrite, ob.rewrite) for oa, ob in zip(outputs[a], outputs[b])]
        both = [v for v in (keep[a], keep[b]) if math.isfinite(v)]
        rows.append({"pair": f"{a} vs. {b}", "n_items": len(sims), "ua_agree": _mean(agree),
                     "rewrite_sim": _mean(sims), "unknown_preservation": float(np.mean(both)) if both else NAN})
    return pd.DataFrame(rows, columns=["pair", "n_items", "ua_agree", "rewrite_sim", "unknown_preservation"])


def _fmt(v: Any) -> str:
    return "–" if not isinstance(v, (int, float)) or not math.isfinite(v) else f"{v:.3f}"


def stability_tables(pairs: pd.DataFrame, per_backbone: pd.DataFrame) -> list[Table]:
    """Table 11 (pairs) and the per-backbone protocol table."""
    p_display = pd.DataFrame({"Pair": pairs["pair"], "n": pairs["n_items"], "UA agree": pairs["ua_agree"].map(_fmt),
                              "Rewrite sim.": pairs["rewrite_sim"].map(_fmt),
                              "Unknown preserv.": pairs["unknown_preservation"].map(_fmt)})
    b_display = pd.DataFrame({
        "Backbone": per_backbone["backbone"], "n": per_backbone["n_items"],
        "unknown rate": per_backbone["unknown_rate"].map(_fmt),
        "unknown preserv.": per_backbone["unknown_preservation"].map(_fmt),
        "unsupported concretisation": per_backbone["unsupported_concretisation"].map(_fmt),
    })
    return [
        Table("backbone_table11", "Table 11. Supporting-backbone stability: known/unknown agreement of UA answers, "
              "normalised rewrite similarity, unknown preservation (mean of the pair).", pairs, p_display),
        Table("backbone_protocol", "Per backbone: UA unknown rate, unknown preservation and unsupported "
              "concretisation (a rewrite adds a year, region or entity that neither q nor a known answer "
              "contains).", per_backbone, b_display),
    ]


def place_lexicon(services: Any) -> tuple[str, ...]:
    """Built-in places plus the offline corpus's places when a corpus is available."""
    places = set(BUILTIN_PLACES_EN) | set(BUILTIN_PLACES_ZH)
    try:
        places |= set(corpus_places(services))
    except Exception as e:  # noqa: BLE001 - no corpus (package missing): the built-in list serves
        log.info("no corpus place lexicon (%s); using the built-in list", e)
    return tuple(sorted(p for p in places if len(p) >= 2))


async def replay_all(
    items: Sequence[FrozenItem], backbones: Mapping[str, Backbone], concurrency: int = 8
) -> dict[str, list[Replay | None]]:
    """Every backbone's replay of every item, aligned with ``items`` (None where it failed)."""
    out = {}
    for name, bb in backbones.items():
        out[name] = await bounded([functools.partial(_replay_or_none, it, bb) for it in items], concurrency)
    return out


async def _replay_or_none(item: FrozenItem, backbone: Backbone) -> Replay | None:
    try:
        return await replay(item, backbone)
    except (CallError, UnscoredError) as e:  # one failed item is excluded, not the analysis
        log.warning("replay of %s failed: %s", item.instance.id, e)
        return None


def replayed_by_all(
    items: Sequence[FrozenItem], outputs: Mapping[str, Sequence[Replay | None]]
) -> tuple[list[FrozenItem], dict[str, list[Replay]]]:
    """Keep the items every backbone replayed, so that backbones are compared on the same items."""
    keep = [i for i in range(len(items)) if all(outs[i] is not None for outs in outputs.values())]
    return [items[i] for i in keep], {n: [outs[i] for i in keep] for n, outs in outputs.items()}  # type: ignore[misc]


def stability_report(
    items: Sequence[FrozenItem], outputs: Mapping[str, Sequence[Replay]], concretiser: Concretiser
) -> list[Table]:
    """Table 11 and the per-backbone table for replayed items."""
    per_backbone = backbone_rows(items, outputs, concretiser)
    return stability_tables(pair_rows(outputs, per_backbone), per_backbone)


def backbone_stability_task(cfg: Any, services: Any) -> None:
    """Task ``backbone_stability``: replay frozen questions with ``robustness.backbones``.

    Reads ``robustness.source``, ``robustness.budgets`` (the k values to keep; None =
    all) and ``robustness.backbones`` (name -> {ua, rewriter} config nodes);
    instances come from ``cfg.dataset``. Writes tables to ``cfg.paths.output_dir``.
    """
    jobs = select_budgets(load_jobs(_source(cfg), cfg.tracking.uri), cfg.robustness.get("budgets"))
    dataset = build(cfg.dataset, services)
    items = frozen_items(jobs, dataset.instances)
    if not items:
        raise ValueError("the source runs have no clarification questions to replay")
    backbones = {
        name: Backbone(build(node.ua, services), build(node.rewriter, services))
        for name, node in cfg.robustness.backbones.items()
    }
    replays = asyncio.run(replay_all(items, backbones, cfg.get("concurrency", 8)))
    items, outputs = replayed_by_all(items, replays)
    n_failed = len(next(iter(replays.values()), [])) - len(items)
    tables = stability_report(items, outputs, Concretiser.from_places(place_lexicon(services)))
    out = Path(cfg.paths.output_dir)
    files = write_tables(tables, out, "backbone_stability")
    write_replays(items, outputs, out / "backbone_replays.jsonl")
    metrics = {**stability_metrics(tables), "n_items": float(len(items)), "n_failed_items": float(n_failed)}
    files += [write_metrics(metrics, out), out / "backbone_replays.jsonl"]
    log_task_run(cfg, "backbone_stability", metrics, files)
    print(markdown(tables[0].display), flush=True)


def stability_metrics(tables: Sequence[Table]) -> dict[str, float]:
    """Flat metrics: ``ua_agree.<a vs. b>``, ``rewrite_sim...``, ``unknown_preservation.<bb>`` ..."""
    pairs, per_backbone = tables[0].data, tables[1].data
    out: dict[str, float] = {}
    for r in pairs.itertuples():
        key = str(r.pair).replace(" vs. ", "_vs_")
        out.update({f"ua_agree.{key}": r.ua_agree, f"rewrite_sim.{key}": r.rewrite_sim})
    for r in per_backbone.itertuples():
        out.update({f"unknown_rate.{r.backbone}": r.unknown_rate,
                    f"unknown_preservation.{r.backbone}": r.unknown_preservation,
                    f"unsupported_concretisation.{r.backbone}": r.unsupported_concretisation})
    return {k: float(v) for k, v in out.items()}


def write_replays(items: Sequence[FrozenItem], outputs: Mapping[str, Sequence[Replay]], path: Path) -> Path:
    """One JSON line per item with every backbone's answers and rewrite (for auditing)."""
    with path.open("w", encoding="utf-8") as f:
        for i, item in enumerate(items):
            row = {"id": item.instance.id, "questions": list(item.questions),
                   "backbones": {n: {"answers": list(o[i].answers), "rewrite": o[i].rewrite}
                                 for n, o in outputs.items()}}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


# ============================================================================ offline baselines


class TypeRestrictedUserAnswerer:
    """Baseline UA (no LLM): the rule UA, but ``unknown`` for questions outside ``types``.

    A second, stricter offline "backbone" for backbone-stability runs; it is a
    named baseline, never a stand-in for a model.
    """

    def __init__(self, services: Any, types: Sequence[str] = ("time", "region")) -> None:
        from cts.roles.rules import RuleUserAnswerer

        self.inner = RuleUserAnswerer(services)
        self.types = frozenset(types)

    async def answer(self, fused_query: str, question: str) -> str:
        """Answer like the rule UA when the question asks about one of ``types``."""
        if not self.types & set(classify_question(question)):
            return UNKNOWN
        return await self.inner.answer(fused_query, question)


class BracketRewriterBaseline:
    """Baseline Rewriter (no LLM): ``q (a1; a2)`` with the known answers; unknowns add nothing."""

    def __init__(self, services: Any = None, sep: str = "; ") -> None:
        del services
        self.sep = sep

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str:
        """Append the known answers in brackets."""
        known = [p.answer.strip() for p in qa if not p.is_unknown and p.answer.strip()]
        return f"{blurred_query.strip()} ({self.sep.join(known)})" if known else blurred_query.strip()


class ConcretisingRewriterBaseline:
    """Negative-control Rewriter (no LLM): fills every ``unknown`` with a fixed value.

    It breaks the protocol on purpose (a time question answered ``unknown`` gets
    ``year``, a region question gets ``place``), so that a stability run shows
    what unsupported concretisation looks like in the metrics.
    """

    def __init__(self, services: Any = None, year: str = "2024", place: str = "United States") -> None:
        del services
        self.fill = {"time": year, "region": place}

    async def rewrite(self, blurred_query: str, qa: Sequence[QA]) -> str:
        """Append known answers and invented values for the unknown ones."""
        parts = [p.answer for p in qa if not p.is_unknown]
        for p in qa:
            if p.is_unknown:
                parts += [self.fill[t] for t in classify_question(p.question) if t in self.fill]
        return ", ".join([blurred_query.strip(), *parts]) if parts else blurred_query.strip()
