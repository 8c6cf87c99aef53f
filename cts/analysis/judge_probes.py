"""Judge probes that need no human: does the judge's label move when nothing that matters does?

Every judgeable answer of the source runs (as Table 9's, :func:`cts.analysis.judge_robustness.frozen_arms`)
is judged once as it is (the baseline) and once per probe:

- ``shuffle``: the gold nuggets in another order (a seeded permutation per answer); a judge that
  labels each nugget on its own is order-free, so its flip rate is exactly 0;
- ``pad``: the answer followed by irrelevant text of the same language, as long as the answer
  times ``pad_ratio``: other instances' answers in the sweep, those that share the fewest content
  tokens with this instance's nuggets first (a seeded choice among equals);
- ``repeat``: the same call again, as repeat ``repeat`` (its own cache key, :func:`cts.llm.sample_scope`),
  so a cached reply cannot stand in for a fresh sample.

Per probe: the label flip rate (share of nuggets whose label differs from the baseline's) and the
score shift (probed minus baseline restore_score_100), each with a cluster bootstrap CI over
instances (the dataset's clusters when the sweep set ``dataset.cluster_field``).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cts.analysis.common import bounded
from cts.analysis.judge_robustness import FrozenArm
from cts.core.contracts import Judge
from cts.core.records import infra_stop
from cts.core.scoring import restore_score
from cts.core.types import Gold, Label, Nugget
from cts.llm import sample_scope
from cts.report.tables import Table
from cts.stats.bootstrap import DEFAULT_RESAMPLING, Resampling
from cts.stats.cluster import cluster_bootstrap_ci
from cts.text.tokens import content_tokens, is_cjk

log = logging.getLogger(__name__)

PROBES = ("shuffle", "pad", "repeat")
NAN = float("nan")
Key = tuple[str, str]


@dataclass(frozen=True)
class Probed:
    """The baseline and one probe's labels of one answer."""

    instance_id: str
    base: Mapping[str, Label]
    probed: Mapping[str, Label]


def _rng(seed: int, *parts: str) -> np.random.Generator:
    digest = hashlib.sha256("\x1f".join([str(seed), *parts]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def shuffled(nuggets: Sequence[Nugget], seed: int, key: Key) -> list[Nugget]:
    """The nuggets in a seeded order other than the given one (when there are two or more)."""
    order = list(range(len(nuggets)))
    if len(order) > 1:
        rng = _rng(seed, *key)
        while order == sorted(order):
            order = [int(i) for i in rng.permutation(len(nuggets))]
    return [nuggets[i] for i in order]


def padding(key: Key, answers: Mapping[Key, str], gold: Gold, ratio: float, seed: int) -> str:
    """Irrelevant text of the answer's language, ``ratio`` times its length (see the module docstring).

    Shorter (empty) when the other instances' answers in that language run out: such an answer is
    then padded with what there is (nothing), and its labels can only stay.
    """
    answer = answers[key]
    cjk = is_cjk(answer)
    wanted = set(content_tokens(" ".join(n.text for n in gold.nuggets)))
    others = [(k, a) for k, a in answers.items() if k[0] != key[0] and a.strip() and is_cjk(a) == cjk]
    rng = _rng(seed, *key)
    ranked = sorted(others, key=lambda item: (len(wanted & set(content_tokens(item[1]))), rng.random()))
    need, text = int(math.ceil(len(answer) * ratio)), ""
    for _, other in ranked:
        if len(text) >= need:
            break
        text += ("" if cjk else " ") + other
    return text.strip()[:need]


@dataclass(frozen=True)
class Probing:
    """Which probes run and how (the ``probes.*`` keys of ``experiment=judge_probes``).

    Attributes:
        probes: The probes (:data:`PROBES`).
        seed: Seed of the shuffles and of the padding's choice.
        pad_ratio: Padding length as a share of the answer's.
        repeat: Times the answer is repeated by the ``repeat`` probe.
    """

    probes: Sequence[str] = PROBES
    seed: int = 0
    pad_ratio: float = 1.0
    repeat: int = 1


async def probe_all(
    arms: Sequence[FrozenArm],
    gold: Mapping[str, Gold],
    judge: Judge,
    probing: Probing = Probing(),
    *,
    concurrency: int = 8,
) -> dict[str, list[Probed]]:
    """Per probe, every unique (instance, answer)'s baseline and probed labels.

    An answer whose baseline or probed judgement stays invalid is left out of that probe (logged);
    an infrastructure failure stops the analysis.
    """
    probes, seed, pad_ratio, repeat = probing.probes, probing.seed, probing.pad_ratio, probing.repeat
    unknown = sorted(set(probes) - set(PROBES))
    if unknown:
        raise ValueError(f"unknown probes {unknown}; choose from {', '.join(PROBES)}")
    answers = {a.key: a.answer for a in arms if a.instance_id in gold}
    keys = list(answers)

    def call(key: Key, probe: str | None) -> Callable[[], Awaitable[Mapping[str, Label] | None]]:
        async def run() -> Mapping[str, Label] | None:
            try:
                return await judged(key, probe)
            except Exception as e:  # noqa: BLE001 - an unscored item is left out (counted), never 0...
                if infra_stop(e):
                    raise  # ...but the spend limit, an open circuit or a dead endpoint stops the analysis
                log.warning("judge failed on %s (%s): %s", key[0], probe or "baseline", e)
                return None

        return run

    async def judged(key: Key, probe: str | None) -> Mapping[str, Label]:
        nuggets, answer = list(gold[key[0]].nuggets), answers[key]
        if probe == "shuffle":
            return await judge.judge(answer, shuffled(nuggets, seed, key))
        if probe == "pad":
            sep = "" if is_cjk(answer) else "\n\n"
            return await judge.judge(answer + sep + padding(key, answers, gold[key[0]], pad_ratio, seed), nuggets)
        if probe == "repeat":
            with sample_scope(repeat):
                return await judge.judge(answer, nuggets)
        return await judge.judge(answer, nuggets)

    base = await bounded([call(k, None) for k in keys], concurrency)
    out = {}
    for probe in probes:
        probed = await bounded([call(k, probe) for k in keys], concurrency)
        out[probe] = [Probed(k[0], b, p) for k, b, p in zip(keys, base, probed) if b is not None and p is not None]
    return out


def probe_rows(
    found: Mapping[str, Sequence[Probed]],
    gold: Mapping[str, Gold],
    clusters: Mapping[str, str],
    boot: Resampling = DEFAULT_RESAMPLING,
) -> pd.DataFrame:
    """Per probe: answers, nuggets, flip rate and score shift with their cluster bootstrap CIs."""
    rows = []
    for probe, items in found.items():
        flips, flip_clusters, shifts, shift_clusters = [], [], [], []
        for it in items:
            cluster = clusters.get(it.instance_id, it.instance_id)
            for n in it.base:
                flips.append(float(it.probed.get(n) != it.base[n]))
                flip_clusters.append(cluster)
            nuggets = gold[it.instance_id].nuggets
            b, p = restore_score(it.base, nuggets), restore_score(it.probed, nuggets)
            if b is not None and p is not None:
                shifts.append((p, b))
                shift_clusters.append(cluster)
        flip = cluster_bootstrap_ci(flips, [0.0] * len(flips), flip_clusters, boot)
        shift = cluster_bootstrap_ci([s[0] for s in shifts], [s[1] for s in shifts], shift_clusters, boot)
        rows.append(
            {
                "probe": probe,
                "n_answers": float(len(items)),
                "n_nuggets": float(len(flips)),
                "flip_rate": flip.mean,
                "flip_rate_ci_low": flip.low,
                "flip_rate_ci_high": flip.high,
                "score_shift": shift.mean,
                "score_shift_ci_low": shift.low,
                "score_shift_ci_high": shift.high,
                "n_clusters": float(shift.n_clusters),
            }
        )
    return pd.DataFrame(rows)


def probe_table(rows: pd.DataFrame, judge: str, confidence: float) -> Table:
    """The probes table: flip rate and score shift with CIs, one row per probe."""

    def ci(r: Mapping[str, float], name: str, fmt: str) -> str:
        vals = [r[name], r[f"{name}_ci_low"], r[f"{name}_ci_high"]]
        shown = ["–" if not math.isfinite(v) else format(v, fmt) for v in vals]
        return f"{shown[0]} [{shown[1]}, {shown[2]}]"

    level = f"{confidence:.0%} CI"
    display = pd.DataFrame(
        [
            {
                "Probe": r["probe"],
                "answers": int(r["n_answers"]),
                "nuggets": int(r["n_nuggets"]),
                f"label flip rate [{level}]": ci(r, "flip_rate", ".3f"),
                f"score shift [{level}]": ci(r, "score_shift", "+.2f"),
            }
            for r in rows.to_dict("records")
        ]
    )
    caption = (
        f"Judge probes ({judge}): labels that flip when the nuggets are reordered (shuffle), the answer is "
        "padded with irrelevant text of its language (pad), or the call is repeated (repeat); CIs over instances"
    )
    return Table("judge_probes", caption, rows, display)


def probe_metrics(rows: pd.DataFrame) -> dict[str, float]:
    """``flip_rate.<probe>``, ``score_shift.<probe>`` and their CI bounds."""
    out = {}
    for r in rows.to_dict("records"):
        for name in ("flip_rate", "score_shift"):
            for suffix in ("", "_ci_low", "_ci_high"):
                out[f"{name}{suffix}.{r['probe']}"] = float(r[f"{name}{suffix}"])
    return out
