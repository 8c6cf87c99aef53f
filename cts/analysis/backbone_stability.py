"""Backbone stability (paper Table 11): replay frozen clarification questions.

Each UA/Rewriter backbone replays the frozen questions of the source jobs; the report
gives, per pair of backbones, known/unknown agreement of the UA answers and the
normalised similarity of the rewrites; per backbone, the unknown rate, the
unknown-preservation rate and the unsupported-concretisation rate. No clarify or
search call is made.
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cts.analysis.common import bounded
from cts.core.contracts import Rewriter, UserAnswerer
from cts.core.records import Record, infra_stop
from cts.core.types import QA, UNKNOWN, CallError, Instance, UnscoredError
from cts.protocol.repeats import instance_means
from cts.report.jobs import Job
from cts.report.tables import Table
from cts.text.lexicon import place_pattern
from cts.text.qtypes import classify_question
from cts.text.tokens import STOPWORDS_EN, tokenize
from cts.tracking import Assessed

log = logging.getLogger(__name__)

NAN = float("nan")


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
    """Unique (instance, questions) of the clarified records of ``jobs`` (a job's in id order).

    A job's repeats are reduced first (:func:`cts.protocol.repeats.instance_means` keeps repeat
    0's questions), so a job gives one item per instance however many repeats it ran.
    """
    by_id = {i.id: i for i in instances}
    items: dict[tuple[str, tuple[str, ...]], FrozenItem] = {}
    for job in jobs:
        for r in instance_means(job.records):
            if r.questions and r.id in by_id:
                items.setdefault((r.id, r.questions), FrozenItem(by_id[r.id], r.questions, _types(r)))
    return list(items.values())


def _types(r: Record) -> tuple[tuple[str, ...], ...]:
    return tuple(
        r.question_types[i] if i < len(r.question_types) else classify_question(q) for i, q in enumerate(r.questions)
    )


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
        """Build from a place lexicon (see :func:`cts.compose.services.concretiser_places`)."""
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
        rows.append(
            {
                "backbone": name,
                "n_items": len(outs),
                "n_answers": len(answers),
                "unknown_rate": _mean([a == UNKNOWN for a in answers]),
                "unknown_preservation": _mean(keep),
                "unsupported_concretisation": _mean(unsupported),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "backbone",
            "n_items",
            "n_answers",
            "unknown_rate",
            "unknown_preservation",
            "unsupported_concretisation",
        ],
    )


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
        agree = [
            (x == UNKNOWN) == (y == UNKNOWN)
            for oa, ob in zip(outputs[a], outputs[b])
            for x, y in zip(oa.answers, ob.answers)
        ]
        sims = [rewrite_similarity(oa.rewrite, ob.rewrite) for oa, ob in zip(outputs[a], outputs[b])]
        both = [v for v in (keep[a], keep[b]) if math.isfinite(v)]
        rows.append(
            {
                "pair": f"{a} vs. {b}",
                "n_items": len(sims),
                "ua_agree": _mean(agree),
                "rewrite_sim": _mean(sims),
                "unknown_preservation": float(np.mean(both)) if both else NAN,
            }
        )
    return pd.DataFrame(rows, columns=["pair", "n_items", "ua_agree", "rewrite_sim", "unknown_preservation"])


def _fmt(v: Any) -> str:
    return "–" if not isinstance(v, (int, float)) or not math.isfinite(v) else f"{v:.3f}"


def stability_tables(pairs: pd.DataFrame, per_backbone: pd.DataFrame) -> list[Table]:
    """Table 11 (pairs) and the per-backbone protocol table."""
    p_display = pd.DataFrame(
        {
            "Pair": pairs["pair"],
            "n": pairs["n_items"],
            "UA agree": pairs["ua_agree"].map(_fmt),
            "Rewrite sim.": pairs["rewrite_sim"].map(_fmt),
            "Unknown preserv.": pairs["unknown_preservation"].map(_fmt),
        }
    )
    b_display = pd.DataFrame(
        {
            "Backbone": per_backbone["backbone"],
            "n": per_backbone["n_items"],
            "unknown rate": per_backbone["unknown_rate"].map(_fmt),
            "unknown preserv.": per_backbone["unknown_preservation"].map(_fmt),
            "unsupported concretisation": per_backbone["unsupported_concretisation"].map(_fmt),
        }
    )
    return [
        Table(
            "backbone_table11",
            "Table 11. Supporting-backbone stability: known/unknown agreement of UA answers, "
            "normalised rewrite similarity, unknown preservation (mean of the pair).",
            pairs,
            p_display,
        ),
        Table(
            "backbone_protocol",
            "Per backbone: UA unknown rate, unknown preservation and unsupported "
            "concretisation (a rewrite adds a year, region or entity that neither q nor a known answer "
            "contains).",
            per_backbone,
            b_display,
        ),
    ]


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
    except (CallError, UnscoredError) as e:  # one failed item is excluded, not the analysis...
        if infra_stop(e):
            raise  # ...unless the infrastructure failed (spend limit and open circuit are no CallError: they pass)
        log.warning("replay of %s failed: %s", item.instance.id, e)
        return None


def replayed_by_all(
    items: Sequence[FrozenItem], outputs: Mapping[str, Sequence[Replay | None]]
) -> tuple[list[FrozenItem], dict[str, list[Replay]]]:
    """Keep the items every backbone replayed, so that backbones are compared on the same items."""
    keep = [i for i in range(len(items)) if all(outs[i] is not None for outs in outputs.values())]
    return [items[i] for i in keep], {n: [o for i in keep if (o := outs[i]) is not None] for n, outs in outputs.items()}


def stability_report(
    items: Sequence[FrozenItem], outputs: Mapping[str, Sequence[Replay]], concretiser: Concretiser
) -> list[Table]:
    """Table 11 and the per-backbone table for replayed items."""
    per_backbone = backbone_rows(items, outputs, concretiser)
    return stability_tables(pair_rows(outputs, per_backbone), per_backbone)


def stability_metrics(tables: Sequence[Table]) -> dict[str, float]:
    """Flat metrics: ``ua_agree.<a vs. b>``, ``rewrite_sim...``, ``unknown_preservation.<bb>`` ..."""
    pairs, per_backbone = tables[0].data, tables[1].data
    out: dict[str, float] = {}
    for r in pairs.itertuples():
        key = str(r.pair).replace(" vs. ", "_vs_")
        out.update({f"ua_agree.{key}": r.ua_agree, f"rewrite_sim.{key}": r.rewrite_sim})
    for r in per_backbone.itertuples():
        out.update(
            {
                f"unknown_rate.{r.backbone}": r.unknown_rate,
                f"unknown_preservation.{r.backbone}": r.unknown_preservation,
                f"unsupported_concretisation.{r.backbone}": r.unsupported_concretisation,
            }
        )
    return {k: float(v) for k, v in out.items()}


def write_replays(items: Sequence[FrozenItem], outputs: Mapping[str, Sequence[Replay]], path: Path) -> Path:
    """One JSON line per item with every backbone's answers and rewrite (for auditing)."""
    with path.open("w", encoding="utf-8") as f:
        for i, item in enumerate(items):
            row = {
                "id": item.instance.id,
                "questions": list(item.questions),
                "backbones": {n: {"answers": list(o[i].answers), "rewrite": o[i].rewrite} for n, o in outputs.items()},
            }
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def backbone_feedback(
    jobs: Sequence[Job], items: Sequence[FrozenItem], outputs: Mapping[str, Sequence[Replay]]
) -> list[tuple[str, str, Assessed]]:
    """Per job, instance and backbone: how its replay agrees with the run's own UA, as feedback on the trace.

    Named ``ua_agreement.<backbone>`` (the share of questions whose answer is known or
    ``unknown`` alike); the rationale gives the replayed answers and rewrite, the metadata
    the rewrite's similarity to the run's and the replay's unknown count.
    """
    index = {(it.instance.id, it.questions): n for n, it in enumerate(items)}
    out = []
    for job in jobs:
        for r in instance_means(job.records):  # once per instance: the repeat its item replayed (repeat 0)
            n = index.get((r.id, r.questions))
            if not job.run_id or n is None:
                continue
            for name, replays in outputs.items():
                out.append((job.run_id, r.id, _replayed(name, replays[n], r)))
    return out


def _replayed(name: str, replay: Replay, record: Record) -> Assessed:
    agree = [(a == UNKNOWN) == (b == UNKNOWN) for a, b in zip(replay.answers, record.answers)]
    missing = None if agree else ("no_answers", "the run recorded no answers to compare with")
    meta = {
        "analysis": "backbone_stability",
        "unknown_answers": str(sum(a == UNKNOWN for a in replay.answers)),
        "rewrite_similarity": f"{rewrite_similarity(replay.rewrite, record.rewritten_query or ''):.3f}",
    }
    why = f"answers: {json.dumps(list(replay.answers), ensure_ascii=False)}; rewrite: {replay.rewrite}"
    return Assessed(
        f"ua_agreement.{name}", _mean(agree) if agree else None, "CODE", f"backbone:{name}", why[:4000], meta, missing
    )
